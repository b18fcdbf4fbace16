"""`make bench`: run every bench/bench_*.py (each exposes run() -> {figure: value}) and print the figures.

Each benchmark measures with and without WeMask (or a remedy: bench_remedies.py; or simulated quantization in
eval: bench_quantize.py; or wemask's choice scoring against lm-evaluation-harness's: bench_lm_eval.py; or the mask
inside vLLM, and vLLM against transformers: bench_vllm.py, skipped without vLLM) side by side in one process and
reports ratios.
Results are also written to runs/bench.json. Pass names to run a subset: `python bench/run.py hook locate`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent


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
            results[name] = module.run()
        console.print(f"[green]bench {name}[/green] done in {time.perf_counter() - start:.0f} s")
    table = Table(title="wemask benchmarks (ratios: with WeMask / without, same run)")
    table.add_column("benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, figures in results.items():
        for figure, value in figures.items():
            table.add_row(name, figure, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    out = Path("runs/bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"Wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
