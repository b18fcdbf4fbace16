"""`make bench`: run every bench/bench_*.py (each exposes run() -> {figure: value}) and print the figures.

Each benchmark measures with and without WeMask (or a remedy: bench_remedies.py; or simulated quantization in
eval: bench_quantize.py; or wemask's choice scoring against lm-evaluation-harness's: bench_lm_eval.py; or the mask
inside vLLM, and vLLM against transformers: bench_vllm.py, bench_grpo_vllm.py) side by side in one process and
reports ratios.

A benchmark module may declare `NEEDS` (the packages it imports beyond wemask's own, e.g. `("vllm",)`): it runs only
where they are installed, and `--needing vllm` runs just the benchmarks that need vLLM (`make bench` runs those
with the vLLM environment's python). `SMOKE` (module constants to replace) gives its smallest size: `--smoke` runs
each benchmark once at that size (tests/test_bench_smoke.py), to check that it runs, not to measure.
Results are merged into runs/bench.json (`--output`) as each benchmark finishes, each with a `measured` record (date, machine,
library versions, the command that reproduces it); docs/results/bench.json is the copy the documentation's
benchmark page is built from. Pass names to run a subset: `python bench/run.py hook locate`.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "lm-eval")


@dataclass(frozen=True)
class Bench:
    """One bench/bench_NAME.py, read without importing it."""

    name: str
    path: Path
    needs: tuple[str, ...]
    uses_embedded_model: bool

    def missing(self) -> list[str]:
        """The packages of `needs` this environment lacks."""
        return [package for package in self.needs if importlib.util.find_spec(package) is None]


def declared(path: Path) -> dict:
    """The module's top-level constants NEEDS and USES_EMBEDDED_MODEL (literal values)."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("NEEDS", "USES_EMBEDDED_MODEL"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def benches() -> list[Bench]:
    """Every bench/bench_*.py, by name."""
    found = []
    for path in sorted(HERE.glob("bench_*.py")):
        constants = declared(path)
        found.append(Bench(path.stem.removeprefix("bench_"), path, tuple(constants.get("NEEDS", ())),
                           constants.get("USES_EMBEDDED_MODEL", True)))  # fmt: skip
    return found


def measured(name: str, smoke: bool) -> dict:
    """When, where and with what a benchmark ran, and the command that runs it again."""
    from wemask_cli.runtime.versions import library_versions

    cpu = platform.processor() or platform.machine()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPU cores ({cpu}, {platform.system()}); GPU: {gpu_name()}",
        "versions": {k: v for k, v in library_versions(LIBRARIES).items() if v is not None},
        "command": f"python bench/run.py {'--smoke ' if smoke else ''}{name}",
    }


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


def run_one(bench: Bench, smoke: bool) -> dict:
    """Import bench_NAME.py and run it (at its SMOKE size with `smoke`)."""
    spec = importlib.util.spec_from_file_location(bench.path.stem, bench.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if smoke:
        for constant, value in getattr(module, "SMOKE", {}).items():
            setattr(module, constant, value)
    return {**module.run(), "measured": measured(bench.name, smoke)}


def selected(names: list[str], needing: str | None, console: Console) -> list[Bench]:
    """The benchmarks to run here: those named (all when none), needing `needing`, whose packages are installed."""
    chosen = []
    for bench in benches():
        if (names and bench.name not in names) or (needing and needing not in bench.needs):
            continue
        if missing := bench.missing():
            console.print(f"[yellow]bench {bench.name}[/yellow] not run: needs {', '.join(missing)} "
                          f"(`make bench` runs it in the environment that has it)")  # fmt: skip
            continue
        chosen.append(bench)
    return chosen


def print_table(console: Console, results: dict) -> None:
    table = Table(title="wemask benchmarks (ratios: with WeMask / without, same run)")
    table.add_column("benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, figures in results.items():
        for figure, value in figures.items():
            if figure != "measured":
                table.add_row(name, figure, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/run.py", description="Run wemask's benchmarks.")
    parser.add_argument("names", nargs="*", help="benchmarks to run (bench_NAME.py); all when none")
    parser.add_argument("--needing", help="only the benchmarks that need this package (e.g. vllm)")
    parser.add_argument("--smoke", action="store_true", help="each once at its smallest size: checks that it runs")
    parser.add_argument("--output", type=Path, default=Path("runs/bench.json"), help="the JSON the figures are merged into")
    args = parser.parse_args(argv)
    console = Console()
    results = {}
    for bench in selected(args.names, args.needing, console):
        start = time.perf_counter()
        with console.status(f"bench {bench.name}..."):
            results[bench.name] = run_one(bench, args.smoke)
        merge_into(args.output, {bench.name: results[bench.name]})  # each as it finishes: a stopped run keeps them
        console.print(f"[green]bench {bench.name}[/green] done in {time.perf_counter() - start:.0f} s")
    print_table(console, results)
    console.print(f"Wrote {args.output}")


def merge_into(output: Path, results: dict) -> None:
    """`results` written into the JSON file `output`, beside the benchmarks it holds already."""
    earlier = json.loads(output.read_text()) if output.exists() else {}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({**earlier, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
