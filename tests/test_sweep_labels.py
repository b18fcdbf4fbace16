"""The labels of the sweep in docs/guide/sweeps.md (train at each r, eval each run, report), run through the CLI on
a tiny model: `plain` at r = 0 (never the training's `aware`), the training's mode at its rate, blank on a base
model's masked rates, and no paired change at r = 0 itself, in the printed tables, metrics.json, --json and --csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from conftest import run_main

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
SHORT = ("--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "32", "--save-strategy", "no",
         "--report-to", "none")


def table_rows(out: str, first: bool = True) -> list[list[str]]:
    """The body rows of the rich tables printed in `out` (`first`: of the first one only, the primary metric's), as
    their cells."""
    shown = out.split("└", 1)[0] if first else out
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in shown.splitlines() if line.startswith("│")]


def test_the_sweep_labels_read_as_sweeps_md_says(monkeypatch, capsys, tmp_path, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    evals = {}
    for rate in ("0", "0.3"):  # the sweeps.md loop (a random tiny model has no ME layer to locate: --me-layer 1)
        code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--mask-rate", rate, "--me-layer", "1",
                                "--dataset", DATA, "--use-peft", "-o", f"runs/sweep/r{rate}", *SHORT)  # fmt: skip
        assert code == 0, err
    for rate in ("0", "0.3"):
        code, out, err = run_main(monkeypatch, capsys, "eval", "--model", f"runs/sweep/r{rate}", "--task", "choice", "--limit", "4",
                                  "-o", f"runs/sweep/r{rate}/eval")  # fmt: skip
        assert code == 0, err
        evals[rate] = out
    code, base, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "choice", "--limit", "4",
                               "--mask-rates", "0,0.3,1", "--me-layer", "1", "-o", "runs/base")  # fmt: skip
    assert code == 0, err

    (plain,) = table_rows(evals["0"])  # the r = 0 training run: plain, and no change from itself
    assert plain[:2] == ["0", "plain"] and "Δ" not in evals["0"]
    assert [row[:2] for row in table_rows(evals["0.3"])] == [["0.3", "aware"]]
    rows = table_rows(base)
    assert [row[:2] for row in rows] == [["0", "plain"], ["0.3", ""], ["1", ""]]
    assert rows[0][-2:] == ["", ""] and rows[1][-2].endswith("pt") and "Δ accuracy vs r=0" in " ".join(base.split())
    results = json.loads(Path("runs/base/metrics.json").read_text())["results"]
    assert [(r["mask_rate"], r["mode"], "delta" in r) for r in results if r["metric"] == "accuracy"] == [
        (0.0, "plain", False), (0.3, "", True), (1.0, "", True)
    ]
    trained = json.loads(Path("runs/sweep/r0/eval/metrics.json").read_text())["results"]
    assert {(r["mode"], "delta" in r) for r in trained} == {("plain", False)}

    code, out, err = run_main(monkeypatch, capsys, "report", "runs/sweep/r0", "runs/sweep/r0.3", "runs/base",
                              "--json", "runs/report.json", "--csv", "runs/report.csv")  # fmt: skip
    assert code == 0, err
    rows = []
    for row in table_rows(out, first=False):  # a run's name that wraps continues on a line of its own
        if rows and len(row) > 4 and not (row[1] or row[4]) and row[3]:
            rows[-1][3] += row[3]
        else:
            rows.append(row)
    printed = {(row[1], row[3]): row[2] for row in rows if len(row) > 4 and row[1]}  # (r, runs) -> mode
    assert printed[("0", "r0")] == printed[("0", "sweep/r0/eval")] == printed[("0", "base")] == "plain"
    assert printed[("0.3", "r0.3")] == printed[("0.3", "sweep/r0.3/eval")] == "aware" and printed[("0.3", "base")] == ""
    for found in (json.loads(Path("runs/report.json").read_text()), list(csv.DictReader(Path("runs/report.csv").open()))):
        modes = {(Path(r["run"]).name if "sweep" in r["run"] else "base", float(r["mask_rate"]), r["mode"]) for r in found}
        assert modes == {("r0", 0.0, "plain"), ("eval", 0.0, "plain"), ("r0.3", 0.3, "aware"), ("eval", 0.3, "aware"),
                         ("base", 0.0, "plain"), ("base", 0.3, ""), ("base", 1.0, "")}  # fmt: skip
