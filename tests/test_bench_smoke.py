"""Each benchmark runs once at its smallest size (`bench/run.py --smoke NAME`, a subprocess as `make bench` runs it)
and writes its figures: a broken benchmark fails the suite. The vLLM ones are `vllm` tests (the vLLM environment),
the ones on the embedded model `embedded`; which is which is read from each bench_*.py (NEEDS, USES_EMBEDDED_MODEL)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
bench_run = sys.modules["bench_run"] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
spec.loader.exec_module(bench_run)


def params(vllm: bool) -> list:
    return [pytest.param(bench, marks=[pytest.mark.embedded] if bench.uses_embedded_model else [], id=bench.name)
            for bench in bench_run.benches() if ("vllm" in bench.needs) == vllm]  # fmt: skip


def smoke_run(name: str, tmp_path: Path) -> dict:
    output = tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--output", str(output), name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(output.read_text())[name]
    numbers = {figure: value for figure, value in figures.items() if figure != "measured"}
    assert numbers and all(isinstance(value, (int, float, str)) for value in numbers.values()), figures
    assert "--smoke" in figures["measured"]["command"]
    return numbers


@pytest.mark.parametrize("bench", params(vllm=False))
def test_bench_smoke(bench, tmp_path):
    assert not bench.missing(), f"bench {bench.name} needs {bench.missing()}, which the test extra installs"
    smoke_run(bench.name, tmp_path)


@pytest.mark.parametrize("bench", params(vllm=True))
def test_vllm_bench_smoke(bench, tmp_path):
    from vllm_support import require_vllm

    require_vllm()
    smoke_run(bench.name, tmp_path)


def test_benches_found_and_vllm_ones_declared():
    """Discovery is generic (a new bench_*.py is picked up); the vLLM benchmarks say they need vLLM."""
    names = {bench.name: bench for bench in bench_run.benches()}
    assert {"hook", "startup", "vllm", "grpo_vllm"} <= set(names)
    assert "vllm" in names["vllm"].needs and "vllm" in names["grpo_vllm"].needs
    assert not names["startup"].uses_embedded_model and names["hook"].uses_embedded_model
