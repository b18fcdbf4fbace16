"""Simulated quantization's cost in `eval`: perplexity under W4A4 (and FP4) over plain perplexity.

The embedded SmolLM2-135M-Instruct scores the same 8 windows of 256 tokens of the bundled perplexity text with
eval's own scoring (batch 8); each quantized run includes entering and leaving `simulate` (fake-quantizing the
weights, installing the input hooks, restoring). Runs are interleaved, the median of the repeats is reported.
No goal: simulation is float math plus rounding, so it costs time; the figure says how much.
"""

from __future__ import annotations

import statistics
import time

import torch

from wemask_cli import resources
from wemask_cli.engines.transformers import TransformersEngine
from wemask_cli.eval.quantize import simulate
from wemask_cli.eval.scoring import prefix_token_id, rolling_windows, score_windows
from wemask_cli.models.loading import load_model

SCHEMES = ("w4a4", "fp4")
WINDOWS, WINDOW, REPEATS = 8, 256, 3
SMOKE = {"WINDOWS": 2, "WINDOW": 64, "REPEATS": 1}


@torch.no_grad()
def run() -> dict:
    loaded = load_model(None, dtype="float32")
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer(resources.read_text("eval/perplexity.txt"), add_special_tokens=False).input_ids
    windows = rolling_windows(ids, prefix_token_id(tokenizer), WINDOW)[:WINDOWS]
    engine = TransformersEngine(loaded)

    def evaluate(scheme: str | None) -> float:
        start = time.perf_counter()
        if scheme is None:
            score_windows(engine, windows, WINDOWS, lambda n: None)
        else:
            with simulate(model, scheme):
                score_windows(engine, windows, WINDOWS, lambda n: None)
        return time.perf_counter() - start

    evaluate(None)  # warm-up
    times: dict[str | None, list[float]] = {None: [], **{s: [] for s in SCHEMES}}
    for repeat in range(REPEATS):
        order = [None, *SCHEMES]
        for scheme in order if repeat % 2 == 0 else reversed(order):
            times[scheme].append(evaluate(scheme))
    plain = statistics.median(times[None])
    figures = {f"perplexity eval, {WINDOWS} x {WINDOW} tokens, plain (s)": plain}
    for scheme in SCHEMES:
        seconds = statistics.median(times[scheme])
        figures[f"{scheme} (s)"] = seconds
        figures[f"time ratio {scheme} / plain"] = seconds / plain
    return figures


if __name__ == "__main__":
    print(run())
