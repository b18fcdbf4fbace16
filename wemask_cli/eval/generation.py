"""Generation for the math and refusal tasks: prompts rendered once, cut from the left to fit, batched, seeded."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..engines import engine_of
from ..prompts import left_truncate, render_prompt, warn_truncated
from .data import TRUNCATED_NOTE
from .scoring import model_device, pad_id_of


def encode_prompts(tokenizer, prompts: list, chat: bool, max_positions: int | None, max_new_tokens: int
                   ) -> tuple[list[list[int]], list[str], list[int]]:
    """(token ids, rendered text, tokens cut) per prompt; over-long prompts keep their last tokens (one warning)."""
    room = (max_positions or 10**9) - max_new_tokens
    encoded, texts, cuts = [], [], []
    for prompt in prompts:
        text, special = render_prompt(tokenizer, prompt, chat)
        ids, cut = left_truncate(tokenizer(text, add_special_tokens=special).input_ids or [pad_id_of(tokenizer)], room)
        encoded.append(ids)
        texts.append(text)
        cuts.append(cut)
    warn_truncated(cuts, room, "the model's context less --max-new-tokens", what="prompts", note=TRUNCATED_NOTE)
    return encoded, texts, cuts


@torch.no_grad()
def generate(model, tokenizer, encoded: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float,
             seed: int, batch_size: int, advance: Callable[[int], None]) -> list[str]:
    """Completions (special tokens dropped) for left-padded batches; batch k samples with seed `seed * 100003 + k`.
    An engine such as vLLM generates all prompts at once (greedy: the same tokens; sampled: its own seeding)."""
    if engine_of(model) != "transformers":
        new_ids = model.generate_ids(encoded, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
        advance(len(encoded))
        return tokenizer.batch_decode(new_ids, skip_special_tokens=True)
    device, pad = model_device(model), pad_id_of(tokenizer)
    sampling = temperature > 0
    completions = []
    for chunk, start in enumerate(range(0, len(encoded), batch_size)):
        batch = encoded[start : start + batch_size]
        width = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        torch.manual_seed(seed * 100_003 + chunk)
        output = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens, do_sample=sampling,
            temperature=temperature if sampling else None, top_p=top_p if sampling else None, top_k=None, pad_token_id=pad,
        )
        completions.extend(tokenizer.batch_decode(output[:, width:], skip_special_tokens=True))
        advance(len(batch))
    return completions
