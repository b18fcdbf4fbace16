"""A 4-rate perplexity sweep on the embedded model: one `wemask eval` process against four.

Both sides are real `wemask eval` command lines run as subprocesses (imports, model load, scoring, writing
outputs), one after the other on the same machine, so the ratio is what a user saves by sweeping in one
process instead of a shell loop. Goal: one process <= 0.6x the four.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATES = ("0", "0.3", "0.7", "1.0")
ME_LAYER = "11"  # the embedded SmolLM2-135M-Instruct's ME layer (0-based)
WORKLOAD = ["--task", "perplexity", "--window", "128", "--limit", "4", "--batch-size", "4"]
WARM = True  # one run first, so that both sides find the files cached
SMOKE = {"RATES": ("0",), "WARM": False, "WORKLOAD": ["--task", "perplexity", "--window", "32", "--limit", "1", "--batch-size", "1"]}


def wemask_eval(rates: str, output: Path) -> float:
    command = [sys.executable, "-m", "wemask_cli", "eval", *WORKLOAD, "--mask-rates", rates, "--me-layer", ME_LAYER,
               "--output", str(output)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")
    return seconds


def run() -> dict:
    from wemask_cli.models.gguf_cache import embedded_model_dir

    embedded_model_dir()  # convert the GGUF once, outside the timings
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        tmp = Path(tmp)
        if WARM:
            wemask_eval("0", tmp / "warm")  # warm the file cache for both sides
        one = wemask_eval(",".join(RATES), tmp / "sweep")
        four = sum(wemask_eval(rate, tmp / f"r{rate}") for rate in RATES)
    return {
        f"{len(RATES)}-rate sweep, one process (s)": one,
        f"{len(RATES)} separate processes (s)": four,
        "wall-time ratio one/four (goal <= 0.6)": one / four,
    }


if __name__ == "__main__":
    print(run())
