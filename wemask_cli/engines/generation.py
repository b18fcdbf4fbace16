"""The one batched generation of infer and eval, on whichever engine runs (engines/base.py)."""

from __future__ import annotations

from collections.abc import Callable


def generate(engine, tokenizer, encoded: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float,
             seed: int, batch_size: int, advance: Callable[[int], None] | None = None) -> list[str]:
    """Completions (special tokens dropped) of encoded prompts, greedy at temperature 0 (Engine.generate_ids)."""
    new_ids = engine.generate_ids(encoded, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                                  batch_size=batch_size, advance=advance or (lambda done: None))
    return tokenizer.batch_decode(new_ids, skip_special_tokens=True)
