"""`wemask locate` on the embedded model: wall time over a plain forward, and peak memory with 8 vs 64 prompts.

Time: the 16 default prompts (max 256 tokens), batches of 8; the plain forward is the full model (default
attention, logits included) on the same padded batches. Runs interleaved, median of repeats.
Memory: one fresh process per setting; the peak RSS is reset (/proc/self/clear_refs) after loading the model
and a warm-up, then read back (VmHWM) after locating; glibc's mmap threshold is fixed so that the peak
does not depend on the allocation history. 64 prompts are the same 8 repeated 8 times, so the
batches have the same shapes: a streaming locate keeps the peak flat.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from wemask_cli.method import locate as method
from wemask_cli.models.loading import load_model
from wemask_cli.prompts.rendering import encode
from wemask_cli.prompts.sets import load_prompts

BATCH = 8
MAX_LENGTH = 256
REPEATS = 3
COPIES = (1, 8)  # the first 8 default prompts, x 1 and x 8
SMOKE = {"MAX_LENGTH": 32, "REPEATS": 1, "COPIES": (1, 2)}


def default_ids(tokenizer, max_length: int) -> list[list[int]]:
    return encode(tokenizer, load_prompts(None, None, "text", None), max_length)


@torch.no_grad()
def plain_forward(model, token_ids: list[list[int]], pad_id: int) -> None:
    """The model's own forward on the same batches locate makes."""
    for rows in method.batches(token_ids, BATCH):
        ids, mask = method.pad([token_ids[i] for i in rows], pad_id)
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0), use_cache=False)


def timing() -> dict:
    loaded = load_model(None, dtype="float32")
    model, pad_id = loaded.model, loaded.tokenizer.pad_token_id
    token_ids = default_ids(loaded.tokenizer, MAX_LENGTH)
    runs = {"plain": lambda: plain_forward(model, token_ids, pad_id),
            "locate": lambda: method.locate(model, token_ids, batch_size=BATCH, pad_id=pad_id)}  # fmt: skip
    times = {name: [] for name in runs}
    runs["plain"]()  # warm-up
    for i in range(REPEATS):
        for name in (("plain", "locate") if i % 2 == 0 else ("locate", "plain")):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    plain, located = statistics.median(times["plain"]), statistics.median(times["locate"])
    return {
        "prompts": len(token_ids),
        "plain forward s": plain,
        "locate s": located,
        "locate / plain forward time (goal <= 1.5)": located / plain,
    }


def rss_kb(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def peak_memory_child(copies: int, max_length: int) -> None:
    """In a fresh process: print the peak RSS (MB, model included) while locating the first 8 default prompts x `copies`."""
    torch.set_num_threads(1)
    loaded = load_model(None, dtype="float32")
    pad_id = loaded.tokenizer.pad_token_id
    token_ids = default_ids(loaded.tokenizer, max_length)[:8]
    method.locate(loaded.model, token_ids[:2], pad_id=pad_id)  # warm-up
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    method.locate(loaded.model, token_ids * copies, batch_size=BATCH, pad_id=pad_id)
    print(rss_kb("VmHWM") / 1024)


def peak_memory() -> dict:
    figures = {}
    for copies in COPIES:
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_locate; bench_locate.peak_memory_child({copies}, {MAX_LENGTH})"
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}  # fixed: big tensors are mmapped and given back
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
        figures[8 * copies] = float(out.strip().splitlines()[-1])
    few, many = (8 * copies for copies in COPIES)
    return {
        f"peak RSS MB, {few} prompts": figures[few],
        f"peak RSS MB, {many} prompts": figures[many],
        f"peak RSS ratio {many}/{few} prompts (goal <= 1.1)": figures[many] / figures[few],
    }


def run() -> dict:
    return {**timing(), **peak_memory()}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
