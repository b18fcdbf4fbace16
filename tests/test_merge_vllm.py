"""(vllm env) A LoRA run merged by `wemask merge` loads in `wemask infer --engine vllm` with its saved mask, and
gives the transformers engine's greedy tokens on the same merged folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main
from vllm_support import require_vllm

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")


@pytest.mark.embedded
def test_merged_lora_run_loads_in_vllm(monkeypatch, capsys, tmp_path, embedded_dir):
    require_vllm()
    run, merged = tmp_path / "lora", tmp_path / "merged"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", embedded_dir, "--dataset", DATA, "--use-peft", "--mask-rate", "0.3",
                            "--me-layer", "11", "--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64",
                            "--save-strategy", "no", "--report-to", "none", "-o", str(run))  # fmt: skip
    assert code == 0, err
    code, _, err = run_main(monkeypatch, capsys, "merge", str(run), "-o", str(merged))
    assert code == 0, err
    tokens = {}
    for engine in ("transformers", "vllm"):
        out = tmp_path / f"{engine}.jsonl"
        code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(merged), "--engine", engine, "-p", "What is the capital of Chile?",
                                "--max-new-tokens", "12", "-o", str(out))  # fmt: skip
        assert code == 0, err
        record = json.loads(out.read_text().splitlines()[0])
        tokens[engine] = record["completion"]
    assert tokens["vllm"] == tokens["transformers"]
