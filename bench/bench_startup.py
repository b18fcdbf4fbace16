"""Start-up: `wemask --help` wall time over `trl --help`, interleaved in one run, median of each (goal <= 1.5).

Also `wemask sft --help` (the largest command's help) against the same `trl --help` runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = 15
SMOKE = {"REPEATS": 1}
USES_EMBEDDED_MODEL = False
BIN = Path(sys.executable).parent


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run() -> dict:
    commands = {"wemask": [str(BIN / "wemask"), "--help"], "wemask_sft": [str(BIN / "wemask"), "sft", "--help"],
                "trl": [str(BIN / "trl"), "--help"]}  # fmt: skip
    for command in commands.values():
        wall(command)  # warm the file cache once
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(REPEATS):
        for name, command in commands.items():
            times[name].append(wall(command))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "wemask --help s (median)": median["wemask"],
        "wemask sft --help s (median)": median["wemask_sft"],
        "trl --help s (median)": median["trl"],
        "wemask --help / trl --help (goal <= 1.5)": median["wemask"] / median["trl"],
        "wemask sft --help / trl --help": median["wemask_sft"] / median["trl"],
    }
