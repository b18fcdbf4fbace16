"""The hook's cost on the embedded model: forward time and generation speed, with over without WeMask.

Batch 8 x 256 tokens, mask from layer 11 at r = 0.3; runs interleaved, median of repeats.
"""

from __future__ import annotations

import statistics
import time

import torch

from wemask_cli import WeMaskConfig, apply_wemask, remove_wemask
from wemask_cli.models.loading import load_model

CONFIG = WeMaskConfig(mask_rate=0.3, me_layer=11)
BATCH, TOKENS, NEW_TOKENS = 8, 256, 32
FORWARD_REPEATS, GENERATE_REPEATS = 6, 4
SMOKE = {"BATCH": 2, "TOKENS": 64, "NEW_TOKENS": 4, "FORWARD_REPEATS": 1, "GENERATE_REPEATS": 1}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(model, fn, repeats: int) -> tuple[float, float]:
    """Median seconds of fn() without and with the hook, alternating which runs first."""
    plain, hooked = [], []
    for i in range(repeats):
        for hook in ((False, True) if i % 2 == 0 else (True, False)):
            if hook:
                apply_wemask(model, CONFIG)
                hooked.append(timed(fn))
                remove_wemask(model)
            else:
                plain.append(timed(fn))
    return statistics.median(plain), statistics.median(hooked)


@torch.no_grad()
def run() -> dict:
    loaded = load_model(None, dtype="float32")
    model, tokenizer = loaded.model, loaded.tokenizer
    torch.manual_seed(0)
    ids = torch.randint(100, tokenizer.vocab_size - 100, (BATCH, TOKENS))
    mask = torch.ones_like(ids)
    mask[::2, :16] = 0  # left padding in half the rows: the mask path runs, as in real batches
    forward = lambda: model(input_ids=ids, attention_mask=mask, use_cache=False)
    forward()
    plain_fwd, hooked_fwd = paired(model, forward, repeats=FORWARD_REPEATS)
    prompt = ids[:, :32]
    generate = lambda: model.generate(
        prompt, attention_mask=mask[:, :32] * 0 + 1, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    generate()
    plain_gen, hooked_gen = paired(model, generate, repeats=GENERATE_REPEATS)
    tokens = BATCH * NEW_TOKENS
    return {
        "forward s/batch (no hook)": plain_fwd,
        "forward s/batch (hook)": hooked_fwd,
        "forward time ratio hook/plain (goal <= 1.01)": hooked_fwd / plain_fwd,
        "generate tok/s (no hook)": tokens / plain_gen,
        "generate tok/s (hook)": tokens / hooked_gen,
        "generate tok/s ratio hook/plain (goal >= 0.98)": plain_gen / hooked_gen,
    }
