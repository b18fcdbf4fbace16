"""The README's sweep recipe runs, and runs again with --overwrite, keeping each run's eval folder as wemask's own."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
SHORT = ("--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "32", "--save-strategy", "no",
         "--report-to", "none")


def sweep(monkeypatch, capsys, model: str, *again: str) -> list[str]:
    """The README loop (a random tiny model has no ME layer to locate: --me-layer 1), then the report."""
    errors = []
    for rate in ("0", "0.3"):
        code, _, err = run_main(monkeypatch, capsys, "sft", "--model", model, "--dataset", DATA, "--mask-rate", rate,
                                "--mode", "aware", "--me-layer", "1", "--output-dir", f"runs/r{rate}", *SHORT, *again)
        assert code == 0, err
        errors.append(err)
        code, _, err = run_main(monkeypatch, capsys, "eval", "--model", f"runs/r{rate}", "--task", "choice", "--limit", "4",
                                "-o", f"runs/r{rate}/eval", *again)
        assert code == 0, err
    code, _, err = run_main(monkeypatch, capsys, "report", "runs/r0", "runs/r0.3", "--csv", "runs/report.csv", *again)
    assert code == 0, err
    return errors


def test_the_readme_sweep_runs_twice(monkeypatch, capsys, tmp_path, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    sweep(monkeypatch, capsys, tiny_model_dir)
    first = json.loads(Path("runs/r0.3/eval/metrics.json").read_text())
    errors = sweep(monkeypatch, capsys, tiny_model_dir, "--overwrite")
    assert all("--overwrite: keeping eval in runs/r" in err for err in errors), errors
    again = json.loads(Path("runs/r0.3/eval/metrics.json").read_text())
    assert again["summary"] == first["summary"] and Path("runs/report.csv").is_file()
