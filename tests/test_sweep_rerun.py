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
    one_curve_per_setting(tiny_model_dir)


def one_curve_per_setting(model: str) -> None:
    """The evals of r0 and r0.3 are keyed by their training setting, not their folder: one curve over r per stage,
    its r = 0 point the plain run, in the rows and the figure (the issue's one-point settings)."""
    from wemask_cli.commands.report import gather, points
    from wemask_cli.render.report import report_figure

    rows = gather([Path("runs/r0"), Path("runs/r0.3")])
    curves = {}
    for point in points(rows):
        curves.setdefault((point["stage"], point["line"], point["metric"]), []).append((point["mask_rate"], point["mode"]))
    assert sorted(curves[("eval", "aware", "choice/accuracy")]) == [(0.0, "plain"), (0.3, "aware")]
    assert sorted(curves[("sft", "aware", "train_loss")]) == [(0.0, "plain"), (0.3, "aware")]
    assert {line for _, line, _ in curves} == {"aware"}
    assert {row["model"] for row in rows} == {model} and {row["training"] for row in rows} == {"", "sft"}
    figure = report_figure(rows)
    panel = next(ax for ax in figure.axes if ax.get_title().startswith("eval choice: choice/accuracy "))
    assert all(figure_series(ax) == [("aware", [0.0, 0.3])] for ax in figure.axes if ax.get_visible())
    assert figure_series(panel) == [("aware", [0.0, 0.3])]


def figure_series(ax) -> list[tuple[str, list[float]]]:
    """A panel's labelled series: error-bar curves and dashed baselines, with their x values."""
    curves = [(c.get_label(), [round(x, 3) for x in c.lines[0].get_xdata()]) for c in ax.containers]
    return curves + [(line.get_label(), []) for line in ax.get_lines() if line.get_linestyle() == "--"]
