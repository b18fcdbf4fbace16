"""`--tokens first|massive` reaches every command that masks, is recorded with a run and re-applied on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl"


@pytest.mark.parametrize("command", ["infer", "eval", "sft", "dpo", "grpo"])
def test_every_masking_command_has_the_flag(monkeypatch, capsys, command):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_main(monkeypatch, capsys, command, "--help")
    assert code == 0 and "--tokens" in out


def test_a_bad_value_is_one_line_before_anything_loads(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "infer", "-p", "hi", "--mask-rate", "0.3", "--me-layer", "1",
                            "--tokens", "loud")
    assert code == 2 and err.count("\n") == 1 and "tokens='loud' is unknown: use one of first, massive" in err


def test_recorded_with_the_run_and_reapplied(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", str(DATA), "-o", str(out),
                            "--mask-rate", "0.3", "--me-layer", "1", "--tokens", "massive", "--max-steps", "1",
                            "--save-strategy", "no", "--per-device-train-batch-size", "2", "--max-length", "32")
    assert code == 0, err
    assert json.loads((out / "wemask_config.json").read_text())["tokens"] == "massive"
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "-p", "hi", "--max-new-tokens", "2")
    assert code == 0, err
    assert "Applying the WeMask config saved with" in err and "massive tokens" in err
    records = tmp_path / "records.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "-p", "hi", "--max-new-tokens", "2",
                            "--mask-rate", "0,0.3", "--tokens", "first", "-o", str(records))
    assert code == 0, err
    settings = [json.loads(line)["wemask"] for line in records.read_text().splitlines()]
    assert [s["tokens"] for s in settings] == ["first", "first"]  # the flag overrides the saved rule
    assert settings[1]["me_layer"] == 1  # and the saved ME layer stays
