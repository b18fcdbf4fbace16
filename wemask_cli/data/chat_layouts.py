"""Alpaca and ShareGPT, the layouts LLaMA-Factory and axolotl users already have, recognised without flags.

- Alpaca: `instruction`, optional `input`, `output` (or `chosen`/`rejected` for DPO), optional `system` and
  `history` ([[question, answer], ...]). As in LLaMA-Factory, the user turn is the instruction and the input joined
  by one newline (the input is left out when empty); `history` becomes earlier user/assistant turns and `system`
  a system message.
- ShareGPT: `conversations` of {"from", "value"} turns (human, gpt, system, function_call, observation; also
  user/assistant/tool), optional `system`. DPO: `chosen`/`rejected` are single {"from", "value"} turns (or
  lists of them) that answer the conversation.

Both are `layouts.DataLayout`s. Supervised data (sft) is prompt/completion (Alpaca) or messages (ShareGPT);
preference data (dpo) is prompt/chosen/rejected; prompts (grpo) are the prompt messages, with Alpaca's `output` (or
ShareGPT's last assistant turn) as the `answer` column when there is no `answer` already.
"""

from __future__ import annotations

from wemask_cli.data.formats import PREFERENCE, PROMPTS, SUPERVISED, DataFormat
from wemask_cli.data.layouts import LAYOUTS, DataLayout
from wemask_cli.runtime.errors import WeMaskError

SHAREGPT_ROLES = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
    "system": "system", "function_call": "assistant", "observation": "tool", "tool": "tool", "function": "tool",
}
ALPACA_SFT = DataFormat("alpaca (instruction, input, output)", ("prompt", "completion"))
ALPACA_DPO = DataFormat("alpaca (instruction, input, chosen, rejected)", ("prompt", "chosen", "rejected"))
ALPACA_GRPO = DataFormat("alpaca (instruction, input; answer from output)", ("prompt",), keep_other_columns=True)
SHAREGPT_SFT = DataFormat("sharegpt (conversations of from/value)", ("messages",))
SHAREGPT_DPO = DataFormat("sharegpt (conversations, chosen, rejected)", ("prompt", "chosen", "rejected"))
SHAREGPT_GRPO = DataFormat("sharegpt (conversations; answer from the last gpt turn)", ("prompt",), keep_other_columns=True)


def _label(index: int, labels: list[str] | None) -> str:
    return labels[index] if labels else f"row {index + 1}"


def _text(value, what: str, index: int, labels, where: str, *, required: bool = True) -> str:
    """A text cell (integers become their digits); empty is '' unless required."""
    if value is None or value == "":
        if required:
            raise WeMaskError(f"{where} {_label(index, labels)} has no {what}")
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise WeMaskError(f"{where} {_label(index, labels)}: {what} is {type(value).__name__}, not text")
    return str(value)


# ------------------------------------------------------------------------------------------------------ Alpaca


def is_alpaca(rows: list[dict]) -> bool:
    """Alpaca: an `instruction` with an `output` (or `chosen`/`rejected`), and no chat columns."""
    if not rows or not isinstance(rows[0].get("instruction"), str):
        return False
    keys = set(rows[0])
    return bool({"output", "chosen", "rejected"} & keys) and not {"messages", "prompt", "conversations"} & keys


def _alpaca_prompt(row: dict, index: int, labels, where: str) -> list[dict]:
    messages = []
    system = _text(row.get("system"), "'system'", index, labels, where, required=False)
    if system:
        messages.append({"role": "system", "content": system})
    history = row.get("history") or []
    if not isinstance(history, list) or not all(isinstance(t, (list, tuple)) and len(t) == 2 for t in history):
        raise WeMaskError(f"{where} {_label(index, labels)}: 'history' must be a list of [question, answer] pairs")
    for question, answer in history:
        messages.append({"role": "user", "content": _text(question, "'history' question", index, labels, where)})
        messages.append({"role": "assistant", "content": _text(answer, "'history' answer", index, labels, where)})
    instruction = _text(row.get("instruction"), "'instruction'", index, labels, where)
    extra = _text(row.get("input"), "'input'", index, labels, where, required=False)
    messages.append({"role": "user", "content": f"{instruction}\n{extra}" if extra else instruction})
    return messages


def _assistant(value, what: str, index: int, labels, where: str) -> list[dict]:
    return [{"role": "assistant", "content": _text(value, what, index, labels, where)}]


def _alpaca_prompts(dataset, labels, where: str) -> list[list[dict]]:
    return [_alpaca_prompt(row, i, labels, where) for i, row in enumerate(dataset.to_list())]


def _alpaca_supervised(dataset, labels: list[str] | None, where: str):
    prompts = _alpaca_prompts(dataset, labels, where)
    completions = [_assistant(row.get("output"), "'output'", i, labels, where) for i, row in enumerate(dataset.to_list())]
    return _from_columns(prompt=prompts, completion=completions), ALPACA_SFT


def _alpaca_preference(dataset, labels: list[str] | None, where: str):
    rows = dataset.to_list()
    prompts = _alpaca_prompts(dataset, labels, where)
    pairs = {side: [_assistant(row.get(side), repr(side), i, labels, where) for i, row in enumerate(rows)] for side in ("chosen", "rejected")}
    return _from_columns(prompt=prompts, **pairs), ALPACA_DPO


def _alpaca_rl_prompts(dataset, labels: list[str] | None, where: str):
    rows = dataset.to_list()
    dataset = dataset.add_column("prompt", _alpaca_prompts(dataset, labels, where))
    if "answer" not in dataset.column_names and "output" in dataset.column_names:
        dataset = dataset.add_column("answer", [_text(r.get("output"), "'output'", i, labels, where) for i, r in enumerate(rows)])
    return dataset, ALPACA_GRPO


@LAYOUTS.register
class Alpaca(DataLayout):
    name = "alpaca"
    recognises = staticmethod(is_alpaca)
    feeds = {SUPERVISED.kind: _alpaca_supervised, PREFERENCE.kind: _alpaca_preference, PROMPTS.kind: _alpaca_rl_prompts}


# ---------------------------------------------------------------------------------------------------- ShareGPT


def _is_turn(value) -> bool:
    return isinstance(value, dict) and "from" in value and "value" in value


def is_sharegpt(rows: list[dict]) -> bool:
    """ShareGPT: a `conversations` list of {"from", "value"} turns."""
    turns = rows[0].get("conversations") if rows else None
    return isinstance(turns, list) and bool(turns) and all(_is_turn(t) for t in turns)


def _message(turn, what: str, index: int, labels, where: str) -> dict:
    if not _is_turn(turn):
        raise WeMaskError(f"{where} {_label(index, labels)}: {what} is not a {{'from', 'value'}} turn")
    role = SHAREGPT_ROLES.get(turn["from"])
    if role is None:
        raise WeMaskError(
            f"{where} {_label(index, labels)}: {what} has 'from' {turn['from']!r}; ShareGPT roles are "
            f"{', '.join(SHAREGPT_ROLES)}"
        )
    return {"role": role, "content": _text(turn["value"], f"{what} 'value'", index, labels, where)}


def _conversation(row: dict, index: int, labels, where: str) -> list[dict]:
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise WeMaskError(f"{where} {_label(index, labels)} has no 'conversations'")
    messages = [_message(turn, f"turn {n}", index, labels, where) for n, turn in enumerate(turns, 1)]
    system = _text(row.get("system"), "'system'", index, labels, where, required=False)
    if system and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system})
    return messages


def _check_turn_order(messages: list[dict], needs_reply: bool, index: int, labels, where: str) -> None:
    """A conversation opens with a human turn (after any system turn), never has two human turns in a row, and (for
    training on it, `needs_reply`) holds an assistant turn."""
    roles = [m["role"] for m in messages if m["role"] != "system"]
    problem = None
    if not roles or roles[0] != "user":
        problem = f"it opens with {'an assistant' if roles and roles[0] == 'assistant' else 'a ' + (roles[0] if roles else 'system')} turn, not a human one"
    elif any(a == b == "user" for a, b in zip(roles, roles[1:])):
        problem = "two human turns in a row"
    elif needs_reply and "assistant" not in roles:
        problem = "it has no assistant (gpt) turn to train on"
    if problem:
        raise WeMaskError(f"{where} {_label(index, labels)}: the conversation's turns are out of order ({problem}): "
                          "ShareGPT alternates human and gpt turns, starting with human")


def _reply(value, side: str, index: int, labels, where: str) -> list[dict]:
    turns = value if isinstance(value, list) else [value]
    if not turns:
        raise WeMaskError(f"{where} {_label(index, labels)} has no {side!r}")
    return [_message(turn, repr(side), index, labels, where) for turn in turns]


def _conversations(dataset, labels, where: str, *, needs_reply: bool = False) -> list[list[dict]]:
    """Each row's conversation, its turns checked (`needs_reply`: it holds an assistant turn to train on)."""
    conversations = [_conversation(row, i, labels, where) for i, row in enumerate(dataset.to_list())]
    for i, conversation in enumerate(conversations):
        _check_turn_order(conversation, needs_reply, i, labels, where)
    return conversations


def _sharegpt_supervised(dataset, labels: list[str] | None, where: str):
    return _from_columns(messages=_conversations(dataset, labels, where, needs_reply=True)), SHAREGPT_SFT


def _sharegpt_preference(dataset, labels: list[str] | None, where: str):
    conversations = _conversations(dataset, labels, where)
    pairs = {side: [_reply(row.get(side), side, i, labels, where) for i, row in enumerate(dataset.to_list())] for side in ("chosen", "rejected")}
    return _from_columns(prompt=conversations, **pairs), SHAREGPT_DPO


def _sharegpt_rl_prompts(dataset, labels: list[str] | None, where: str):
    prompts, answers = zip(*(_split_last_reply(c) for c in _conversations(dataset, labels, where)), strict=True)
    dataset = dataset.add_column("prompt", list(prompts))
    if "answer" not in dataset.column_names and all(a is not None for a in answers):
        dataset = dataset.add_column("answer", list(answers))
    return dataset, SHAREGPT_GRPO


def _split_last_reply(messages: list[dict]) -> tuple[list[dict], str | None]:
    """(the prompt up to the last user turn, the assistant reply after it or None)."""
    if messages[-1]["role"] == "assistant" and len(messages) > 1:
        return messages[:-1], messages[-1]["content"]
    return messages, None


def _from_columns(**columns):
    from datasets import Dataset

    return Dataset.from_dict(columns)


@LAYOUTS.register
class ShareGPT(DataLayout):
    name = "sharegpt"
    recognises = staticmethod(is_sharegpt)
    feeds = {SUPERVISED.kind: _sharegpt_supervised, PREFERENCE.kind: _sharegpt_preference, PROMPTS.kind: _sharegpt_rl_prompts}
