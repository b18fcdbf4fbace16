"""Rendering and encoding prompts: the chat template or plain text, encoded within the model's context (cut from the
left, with one warning)."""

from __future__ import annotations

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import warn


def render_prompt(tokenizer, prompt: str | list[dict], chat_template: bool) -> tuple[str, bool]:
    """The text to tokenize, and whether special tokens still need adding: not after a chat template (it writes BOS
    where the model wants one, models/bos.py), nor to a text that already starts with the BOS token (never two)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), False
    text = "\n".join(message["content"] for message in prompt) if isinstance(prompt, list) else prompt
    bos = tokenizer.bos_token
    return text, not (isinstance(bos, str) and bos and text.startswith(bos))


def encode(tokenizer, prompts: list, max_length: int) -> list[list[int]]:
    """Token ids per prompt: chat-formatted prompts through the chat template, text as is (with special tokens)."""
    encoded = []
    for prompt in prompts:
        text, special = render_prompt(tokenizer, prompt, chat_template=isinstance(prompt, list))
        encoded.append(tokenizer(text, add_special_tokens=special, truncation=True, max_length=max_length)["input_ids"])
    if any(len(ids) == 0 for ids in encoded):
        raise WeMaskError("a prompt encodes to no tokens: remove empty prompts")
    return encoded


def context_length(model) -> int | None:
    """The model's maximum number of positions (None when its config does not say)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    length = getattr(config, "max_position_embeddings", None)
    return length if isinstance(length, int) and length > 0 else None


def encode_left_truncated(tokenizer, prompts: list, chat_template: bool, limit: int | None
                          ) -> tuple[list[list[int]], list[str], list[int]]:
    """(token ids, rendered text, tokens cut) per prompt: ids cut FROM THE LEFT to at most `limit` tokens (None: no
    limit). An empty prompt (nothing to generate from) is one line, not a failure inside the model."""
    encoded, texts, cuts = [], [], []
    for number, prompt in enumerate(prompts, 1):
        text, special = render_prompt(tokenizer, prompt, chat_template)
        ids = tokenizer(text, add_special_tokens=special)["input_ids"]
        if not ids:
            raise WeMaskError(f"prompt {number} is empty: nothing to generate from (give some text, or keep the chat template on)")
        ids, cut = left_truncate(ids, limit, tokenizer.bos_token_id)
        encoded.append(ids)
        texts.append(text)
        cuts.append(cut)
    return encoded, texts, cuts


def left_truncate(ids: list[int], room: int | None, bos_id: int | None = None) -> tuple[list[int], int]:
    """The last `room` tokens of `ids` (at least one; None: all) and how many were cut; a leading BOS (`bos_id`)
    stays first, before the last `room - 1` tokens."""
    if room is None:
        return ids, 0
    room = max(1, room)
    if len(ids) <= room:
        return ids, 0
    if room > 1 and bos_id is not None and ids[0] == bos_id:
        return [bos_id, *ids[len(ids) - room + 1 :]], len(ids) - room
    return ids[-room:], len(ids) - room


def warn_truncated(cuts: list[int], limit: int, why: str, *, what: str = "prompt(s)", note: str = "") -> None:
    """One warning line for all the prompts cut from the left (none cut: silent); truncated, never refused."""
    cut = [c for c in cuts if c]
    if cut:
        span = f"{min(cut)}" if min(cut) == max(cut) else f"{min(cut)} to {max(cut)}"
        warn(f"{len(cut)} of {len(cuts)} {what} were longer than {limit} tokens ({why}): truncated from the left, "
             f"{span} tokens cut from the left end" + (f"; {note}" if note else ""))
