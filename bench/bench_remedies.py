"""The remedies' cost on the embedded model: forward time with GatedNorm over plain, and `--tokens massive` over
`--tokens first`. Batch 8 x 256 tokens (half the rows left-padded), float32; interleaved, median of repeats.

Both wall time and this process's CPU time are reported, with one thread: on a shared 2-core machine other
processes inflate wall time in bursts, and with two threads every small parallel operation (the hooks' mask
logic) also pays for waking the other thread, which the busy machine makes erratic (ratios from 1.02 to 1.4
between runs); one thread and CPU time count only our own work."""

from __future__ import annotations

import statistics
import time

import torch

from wemask_cli.interventions import install_all
from wemask_cli.interventions.gated_norm import GatedNorm
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.models.loading import load_model

GATED_NORM = GatedNorm(norms="both", rank=16, layers="all")
FIRST = WeMaskConfig(mask_rate=0.3, me_layer=11, tokens="first")
MASSIVE = WeMaskConfig(mask_rate=0.3, me_layer=11, tokens="massive")
BATCH, TOKENS, REPEATS = 8, 256, 6
SMOKE = {"BATCH": 2, "TOKENS": 64, "REPEATS": 1}


def paired(model, fn, a: list, b: list, repeats: int) -> dict:
    """Median wall and CPU seconds of fn() with interventions `a` installed and with `b`, alternating the order."""
    times = {(clock, which): [] for clock in ("wall", "cpu") for which in (0, 1)}
    for i in range(repeats):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            with install_all(model, (a, b)[which]):
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                times["wall", which].append(time.perf_counter() - wall)
                times["cpu", which].append(time.process_time() - cpu)
    return {key: statistics.median(values) for key, values in times.items()}


def run() -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return measure()
    finally:
        torch.set_num_threads(threads)


def measure() -> dict:
    loaded = load_model(None, dtype="float32")
    model, tokenizer = loaded.model, loaded.tokenizer
    torch.manual_seed(0)
    ids = torch.randint(100, tokenizer.vocab_size - 100, (BATCH, TOKENS))
    mask = torch.ones_like(ids)
    mask[::2, :16] = 0
    forward = lambda: model(input_ids=ids, attention_mask=mask, use_cache=False)
    forward()
    gated = paired(model, forward, [], [GATED_NORM], repeats=REPEATS)
    massive = paired(model, forward, [FIRST], [MASSIVE], repeats=REPEATS)
    return {
        "forward s/batch (plain)": gated["wall", 0],
        "forward s/batch (GatedNorm r16, both norms, all layers)": gated["wall", 1],
        "forward time ratio GatedNorm/plain (goal <= 1.05)": gated["wall", 1] / gated["wall", 0],
        "forward CPU-time ratio GatedNorm/plain": gated["cpu", 1] / gated["cpu", 0],
        "forward s/batch (WeMask r0.3, tokens first)": massive["wall", 0],
        "forward s/batch (WeMask r0.3, tokens massive)": massive["wall", 1],
        "forward time ratio massive/first (goal <= 1.02)": massive["wall", 1] / massive["wall", 0],
        "forward CPU-time ratio massive/first": massive["cpu", 1] / massive["cpu", 0],
    }
