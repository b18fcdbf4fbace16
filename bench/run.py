"""`make bench`: run every bench/bench_*.py (each exposes run() -> {figure: value}) and print the figures.

Each benchmark measures with and without WeMask (or a remedy: bench_remedies.py; or simulated quantization in
eval: bench_quantize.py; or wemask's choice scoring against lm-evaluation-harness's: bench_lm_eval.py; or the mask
inside vLLM, and vLLM against transformers: bench_vllm.py, skipped without vLLM) side by side in one process and
reports ratios.
Results are also written to runs/bench.json, each benchmark with a `measured` record (date, machine, library
versions, the command that reproduces it); docs/results/bench.json is the copy the documentation's benchmark page
is built from. Pass names to run a subset: `python bench/run.py hook locate`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "lm-eval")


def measured(name: str) -> dict:
    """When, where and with what a benchmark ran, and the command that runs it again."""
    from wemask_cli.runtime.versions import library_versions

    cpu = platform.processor() or platform.machine()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPU cores ({cpu}, {platform.system()}); GPU: {gpu_name()}",
        "versions": {k: v for k, v in library_versions(LIBRARIES).items() if v is not None},
        "command": f"python bench/run.py {name}",
    }


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


def main(selected: list[str]) -> None:
    console = Console()
    results = {}
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if selected and name not in selected:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        start = time.perf_counter()
        with console.status(f"bench {name}..."):
            results[name] = {**module.run(), "measured": measured(name)}
        console.print(f"[green]bench {name}[/green] done in {time.perf_counter() - start:.0f} s")
    table = Table(title="wemask benchmarks (ratios: with WeMask / without, same run)")
    table.add_column("benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, figures in results.items():
        for figure, value in figures.items():
            if figure == "measured":
                continue
            table.add_row(name, figure, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    out = Path("runs/bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"Wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
