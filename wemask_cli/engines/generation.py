"""The one batched generation of infer and eval, on whichever engine a model runs (see engines/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..method.batch import pad, pad_id_of
from . import engine_of


@torch.no_grad()
def generate(model, tokenizer, encoded: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float,
             seed: int, batch_size: int, advance: Callable[[int], None] | None = None) -> list[str]:
    """Completions (special tokens dropped) of encoded prompts, greedy at temperature 0. transformers: left-padded
    batches, batch k seeded with `seed * 100003 + k` (so a prompt's sample does not depend on what ran before);
    an engine such as vLLM generates all prompts at once (greedy: the same tokens; sampled: its own seeding)."""
    advance = advance or (lambda done: None)
    if engine_of(model) != "transformers":
        new_ids = model.generate_ids(encoded, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
        advance(len(encoded))
        return tokenizer.batch_decode(new_ids, skip_special_tokens=True)
    device, pad_id = next(model.parameters()).device, pad_id_of(tokenizer)
    sampling = temperature > 0
    completions = []
    for chunk, start in enumerate(range(0, len(encoded), batch_size)):
        ids, mask = pad(encoded[start : start + batch_size], pad_id, "left")
        torch.manual_seed(seed * 100_003 + chunk)
        output = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens, do_sample=sampling,
            temperature=temperature if sampling else None, top_p=top_p if sampling else None, top_k=None, pad_token_id=pad_id,
        )
        completions.extend(tokenizer.batch_decode(output[:, ids.shape[1] :], skip_special_tokens=True))
        advance(ids.shape[0])
    return completions
