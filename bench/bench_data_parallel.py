"""One perplexity eval on the embedded model in one process and in two (`--num_processes 2 --accelerate_config ddp`,
gloo on the CPU), one thread per process: the wall-time ratio of data-parallel eval.

Both sides are real `wemask eval` command lines run as subprocesses (imports, model load in every process, scoring,
writing), one after the other on the same machine; both write the same metrics (tests/test_data_parallel.py). Each
process loads the model and starts its libraries, so the ratio approaches 1/2 as the scoring outgrows that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = ["--task", "perplexity", "--window", "128", "--limit", "48", "--batch-size", "4", "--mask-rates", "0,0.3"]
WARM = True  # one run first, so that both sides find the files cached
SMOKE = {"WARM": False, "WORKLOAD": ["--task", "perplexity", "--window", "32", "--limit", "2", "--batch-size", "1"]}
LAUNCH = ["--num_processes", "2", "--accelerate_config", "ddp"]


def wemask_eval(output: Path, launch: list[str]) -> tuple[float, dict]:
    """Seconds of one `wemask eval` and its metrics.json."""
    from wemask_cli.models.gguf_cache import embedded_model_dir

    command = [sys.executable, "-m", "wemask_cli", "eval", "--model", str(embedded_model_dir()), *WORKLOAD,
               "--output", str(output), *launch]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}  # one thread per process, both sides
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")
    return seconds, json.loads((output / "metrics.json").read_text())


def run() -> dict:
    from wemask_cli.models.gguf_cache import embedded_model_dir

    embedded_model_dir()  # convert the GGUF once, outside the timings
    with tempfile.TemporaryDirectory(prefix="bench-data-parallel-") as tmp:
        tmp = Path(tmp)
        if WARM:
            wemask_eval(tmp / "warm", [])
        one, single = wemask_eval(tmp / "one", [])
        two, launched = wemask_eval(tmp / "two", LAUNCH)
    if single["results"] != launched["results"]:
        raise RuntimeError("the 2-process eval's results differ from the single process's")
    return {
        "eval, 1 process (s)": one,
        "eval, 2 processes (s)": two,
        "wall-time ratio 2 processes / 1": two / one,
        "windows scored per setting": single["results"][0]["n"],
    }


if __name__ == "__main__":
    print(run())
