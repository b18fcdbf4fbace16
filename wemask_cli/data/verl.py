"""verl's RL layout, recognised without flags (a `layouts.DataLayout` feeding prompts and supervised data): `prompt`
(chat messages that already carry the instruction), `reward_model.ground_truth` (the reference answer), `extra_info`
(question, worked solution, split, index).

- prompts (grpo): the prompt is used as is and `answer` is taken from `reward_model.ground_truth`.
- supervised (sft): prompt/completion from `extra_info`: the first non-empty of question | problem | prompt (else the
  `prompt` messages as is) and the first non-empty of answer | solution | response, as a user and an assistant message.
- eval (math): question = the `prompt` messages as is, answer = `reward_model.ground_truth` (VERL_ANSWER).
"""

from __future__ import annotations

from wemask_cli.data.columns import has_column, path_values
from wemask_cli.data.formats import PROMPTS, SUPERVISED, DataFormat, is_conversation
from wemask_cli.data.layouts import LAYOUTS, DataLayout
from wemask_cli.runtime.errors import WeMaskError

VERL_ANSWER = "reward_model.ground_truth"
SFT_QUESTION_KEYS = ("question", "problem", "prompt")
SFT_SOLUTION_KEYS = ("answer", "solution", "response")
VERL_GRPO = DataFormat("verl (prompt messages, answer from reward_model.ground_truth)", ("prompt", "answer"), True)
VERL_SFT = DataFormat("verl (prompt-completion from extra_info)", ("prompt", "completion"))


def is_verl(rows: list[dict]) -> bool:
    """True for verl's RL layout: a `prompt` of chat messages and a `reward_model.ground_truth`."""
    return bool(rows) and is_conversation(rows[0].get("prompt")) and has_column(rows, VERL_ANSWER)


def _verl_prompts(dataset, labels: list[str] | None, where: str):
    """The prompt as is, `answer` from reward_model.ground_truth (None when there is an `answer` already)."""
    if "answer" in dataset.column_names:
        return None
    answers = [_scalar_text(value, VERL_ANSWER, i, labels, where) for i, value in enumerate(path_values(dataset, VERL_ANSWER))]
    return dataset.add_column("answer", answers), VERL_GRPO


def _verl_supervised(dataset, labels: list[str] | None, where: str):
    """prompt/completion from extra_info (None when the file has supervised columns already)."""
    if {"messages", "completion", "text"} & set(dataset.column_names):
        return None
    return _sft_pairs(dataset, labels, where), VERL_SFT


@LAYOUTS.register
class Verl(DataLayout):
    name = "verl"
    recognises = staticmethod(is_verl)
    feeds = {PROMPTS.kind: _verl_prompts, SUPERVISED.kind: _verl_supervised}


def _label(index: int, labels: list[str] | None) -> str:
    return labels[index] if labels else f"row {index + 1}"


def _scalar_text(value, path: str, index: int, labels, where: str) -> str:
    if value is None or value == "" or isinstance(value, bool):
        raise WeMaskError(f"{where} {_label(index, labels)} has no {path!r} (verl layout)")
    if isinstance(value, (dict, list)):
        raise WeMaskError(f"{where} {_label(index, labels)}: {path!r} is a {type(value).__name__}, expected one answer")
    return str(value)


def _first(record: dict, keys: tuple[str, ...]):
    return next((record[k] for k in keys if record.get(k) not in (None, "")), None)


def _sft_pairs(dataset, labels, where: str):
    """prompt/completion messages from extra_info (see the module docstring for the keys and their order)."""
    from datasets import Dataset

    extras = list(dataset["extra_info"]) if "extra_info" in dataset.column_names else []
    held = sorted({k for e in extras[:50] if isinstance(e, dict) for k, v in e.items()})
    if not set(SFT_SOLUTION_KEYS) & set(held):
        raise WeMaskError(
            f"{where} is in verl's RL layout, but extra_info holds no worked solution ({' | '.join(SFT_SOLUTION_KEYS)}) "
            f"for SFT (it holds {held or 'nothing'}): name the columns with --dataset-columns prompt=...,completion=..."
        )
    prompts, completions = [], []
    for index, (extra, prompt) in enumerate(zip(extras, dataset["prompt"], strict=True)):
        extra = extra if isinstance(extra, dict) else {}
        solution = _first(extra, SFT_SOLUTION_KEYS)
        if solution is None:
            raise WeMaskError(f"{where} {_label(index, labels)} has no extra_info {' | '.join(SFT_SOLUTION_KEYS)} to train SFT on")
        question = _first(extra, SFT_QUESTION_KEYS)
        prompts.append([{"role": "user", "content": _scalar_text(question, "extra_info.question", index, labels, where)}]
                       if question is not None else prompt)
        completions.append([{"role": "assistant", "content": _scalar_text(solution, "extra_info.answer", index, labels, where)}])
    return Dataset.from_dict({"prompt": prompts, "completion": completions})
