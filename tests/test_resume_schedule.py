"""A --resume that changes the learning-rate schedule says so; one with the run's own flags says nothing."""

from __future__ import annotations

from pathlib import Path

from conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl"


def test_resume_with_other_max_steps_warns(monkeypatch, capsys, tmp_path, tiny_model_dir):
    base = ("sft", "--model", tiny_model_dir, "--dataset", str(DATA), "-o", str(tmp_path / "r"), "--save-steps", "1",
            "--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none")
    code, _, err = run_main(monkeypatch, capsys, *base, "--max-steps", "2")
    assert code == 0, err
    for torn in ("checkpoint-2/trainer_state.json", "metrics.json"):  # as if killed while saving step 2
        (tmp_path / "r" / torn).unlink()
    code, _, err = run_main(monkeypatch, capsys, *base, "--max-steps", "2", "--resume")
    assert code == 0, err
    assert "changes the learning-rate schedule" not in err
    for torn in ("checkpoint-2/trainer_state.json", "metrics.json"):
        (tmp_path / "r" / torn).unlink()
    code, _, err = run_main(monkeypatch, capsys, *base, "--max-steps", "4", "--resume")
    assert code == 0, err
    warning = [line for line in err.splitlines() if "changes the learning-rate schedule" in line]
    assert len(warning) == 1 and "max_steps 2 -> 4" in warning[0], err
