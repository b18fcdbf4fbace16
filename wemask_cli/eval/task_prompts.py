"""Prompts for the math and refusal tasks: rendered once, cut from the left to fit (one warning); generation itself
is wemask_cli.engines.generation.generate, shared with infer."""

from __future__ import annotations

from wemask_cli.eval.data import TRUNCATED_NOTE
from wemask_cli.prompts.rendering import encode_left_truncated, warn_truncated


def encode_prompts(tokenizer, prompts: list, chat: bool, max_positions: int | None, max_new_tokens: int
                   ) -> tuple[list[list[int]], list[str], list[int]]:
    """(token ids, rendered text, tokens cut) per prompt; over-long prompts keep their last tokens (one warning)."""
    room = (max_positions or 10**9) - max_new_tokens
    encoded, texts, cuts = encode_left_truncated(tokenizer, prompts, chat, room)
    warn_truncated(cuts, room, "the model's context less --max-new-tokens", what="prompts", note=TRUNCATED_NOTE)
    return encoded, texts, cuts
