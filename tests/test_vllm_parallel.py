"""vLLM's tensor parallelism on the embedded model: its 9 attention heads do not split across 2 workers, so
`--tensor-parallel-size 2` is one line before vLLM starts (vLLM itself would stop with a pydantic validation error),
for `wemask infer --engine vllm` and `wemask vllm-serve` alike. (The tiny test models' head size 16 has no vLLM-CPU
kernel, so on a CPU no model here runs tensor parallel 2.)"""

from __future__ import annotations

import pytest
from conftest import run_main
from vllm_support import require_vllm


@pytest.mark.parametrize("command", [["infer", "--engine", "vllm", "-p", "Hi"], ["vllm-serve"]])
def test_heads_that_do_not_split_are_one_line(monkeypatch, capsys, embedded_dir, command):
    require_vllm()
    code, _, err = run_main(monkeypatch, capsys, *command, "--model", embedded_dir, "--tensor-parallel-size", "2")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "--tensor-parallel-size 2: this model's 9 attention heads do not split evenly across 2 workers" in err
