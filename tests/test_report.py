"""`wemask report`: merge eval and training metrics.json files into one table, JSON/CSV rows and one plot."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.commands.report import gather

PPL_TEXT = Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "eval" / "perplexity.txt"
SFT_DATA = Path(__file__).resolve().parent.parent / "data" / "sft_chat.jsonl"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_model_dir) -> Path:
    """A real (tiny) `wemask sft` run, through the command line: its metrics.json is what training writes."""
    from wemask_cli.cli import main

    out = tmp_path_factory.mktemp("trained") / "r0.3"
    args = ["sft", "--model", tiny_model_dir, "--output-dir", str(out), "--dataset", str(SFT_DATA), "--mask-rate", "0.3",
            "--me-layer", "1", "--max-steps", "2", "--per-device-train-batch-size", "2", "--max-length", "32",
            "--save-steps", "2", "--logging-steps", "1", "--report-to", "none"]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["wemask", *args])
        with pytest.raises(SystemExit) as done:
            main()
    assert done.value.code in (0, None)
    return out


@pytest.fixture
def three_runs(monkeypatch, capsys, tiny_model_dir, tmp_path, trained_run):
    runs = tmp_path / "runs"
    for name, rates in (("eval-a", "0,1"), ("eval-b", "0,0.5,1")):
        code, _, err = run_main(
            monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--data", str(PPL_TEXT),
            "--window", "16", "--limit", "2", "--mask-rates", rates, "--me-layer", "1", "--output", str(runs / name),
        )
        assert code == 0, err
    shutil.copytree(trained_run, runs / "r0.3")  # its checkpoint-2 has no metrics.json: ignored
    return runs


def test_report_merges_three_runs(monkeypatch, capsys, three_runs, tmp_path):
    runs = three_runs
    out_json, out_csv = tmp_path / "merged.json", tmp_path / "merged.csv"
    code, stdout, err = run_main(
        monkeypatch, capsys, "report", str(runs / "eval-a"), str(runs / "eval-b"), str(runs / "r0.3"),
        "--json", str(out_json), "--csv", str(out_csv),
    )
    assert code == 0, err
    for name in ("eval-a", "eval-b", "r0.3", "perplexity", "train_loss", "aware", "free", "eval, 2 run(s)", "sft, 1 run(s)"):
        assert name in stdout, name
    rows = json.loads(out_json.read_text())
    assert {r["run"].rsplit("/", 1)[-1] for r in rows} == {"eval-a", "eval-b", "r0.3"}
    ppl = [r for r in rows if r["metric"] == "perplexity"]
    assert sorted((Path(r["run"]).name, r["mask_rate"]) for r in ppl) == [
        ("eval-a", 0.0), ("eval-a", 1.0), ("eval-b", 0.0), ("eval-b", 0.5), ("eval-b", 1.0)
    ]
    assert all(r["stage"] == "eval" and r["mode"] == "free" and r["task"] == "perplexity" for r in ppl)
    trained = {r["metric"]: r for r in rows if r["stage"] == "sft"}
    written = json.loads((runs / "r0.3" / "metrics.json").read_text())
    assert trained["train_loss"]["value"] == written["train_loss"] > 0 and trained["train_loss"]["mask_rate"] == 0.3
    assert trained["train_loss"]["mode"] == "aware"
    assert set(trained) == {"train_loss", "final_loss"}  # bookkeeping numbers and None values are not metrics
    assert len(list(csv.DictReader(out_csv.open()))) == len(rows)
    assert (runs / "report.png").read_bytes()[:4] == b"\x89PNG"  # next to the run directories


def test_report_finds_eval_outputs_inside_run_directories_and_averages_seeds(tmp_path, trained_run):
    run = tmp_path / "r0.3"
    shutil.copytree(trained_run, run)
    (run / "eval").mkdir()
    results = [
        {"mask_rate": 0.3, "mode": "aware", "seed": s, "metric": "accuracy", "value": v, "se": 0.1, "n": 10}
        for s, v in enumerate([0.4, 0.6])
    ]
    (run / "eval" / "metrics.json").write_text(json.dumps({"stage": "eval", "task": "math", "results": results}))
    rows = gather([run])
    acc = next(r for r in rows if r["metric"] == "math/accuracy")
    assert acc["value"] == pytest.approx(0.5) and acc["seeds"] == 2 and acc["std"] == pytest.approx(0.1414, abs=1e-3)
    assert acc["run"] == str(run / "eval")


def test_report_errors_are_one_line(monkeypatch, capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_main(monkeypatch, capsys, "report", str(empty))
    assert code == 2 and err.count("\n") == 1 and "has no metrics.json" in err and "Traceback" not in err
    code, _, err = run_main(monkeypatch, capsys, "report", str(tmp_path / "missing"))
    assert code == 2 and "no such directory" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text("{oops")
    code, _, err = run_main(monkeypatch, capsys, "report", str(bad))
    assert code == 2 and "cannot be read as JSON" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.json").write_text(json.dumps({"accuracy": 0.5}))
    code, _, err = run_main(monkeypatch, capsys, "report", str(other))
    assert code == 2 and "has no 'stage' or 'mask_rate'" in err


def test_report_never_replaces_a_file_without_overwrite(monkeypatch, capsys, tmp_path):
    run = tmp_path / "runs" / "r0.3"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"stage": "sft", "mode": "aware", "mask_rate": 0.3, "train_loss": 2.5}))
    default_png, out_json = tmp_path / "runs" / "report.png", tmp_path / "rows.json"
    for path in (default_png, out_json):
        path.write_text("keep")
        others = [] if path == default_png else ["--json", str(out_json), "--no-plot"]
        code, _, err = run_main(monkeypatch, capsys, "report", str(run), *others)
        flag = "--plot" if path == default_png else "--json"
        assert code == 2 and err == f"wemask: error: {flag} {path} exists: pass --overwrite to replace it, or choose another name\n"
        assert path.read_text() == "keep"
    code, _, err = run_main(monkeypatch, capsys, "report", str(run), "--json", str(out_json), "--overwrite")
    assert code == 0, err
    assert default_png.read_bytes()[:4] == b"\x89PNG" and json.loads(out_json.read_text())[0]["run"] == str(run)


def test_report_keeps_quantized_variants_apart(tmp_path):
    """A `--quantize` sweep's rows at the same rate and mode are separate rows and plot lines, never averaged."""
    from wemask_cli.commands.report import rows_from_document

    results = [
        {"mask_rate": r, "mode": "free", "quantize": q, "seed": 0, "metric": "perplexity", "value": v, "se": 0.1, "n": 8}
        for r, q, v in ((0.0, "none", 22.7), (0.0, "w4a4", 11076.0), (0.3, "none", 23.3), (0.3, "w4a4", 9670.0))
    ]
    rows = rows_from_document("run", {"stage": "eval", "task": "perplexity", "results": results}, tmp_path)
    by_key = {(r["mask_rate"], r["quantize"]): r for r in rows}
    assert len(rows) == 4 and by_key[(0.0, "w4a4")]["value"] == 11076.0 and by_key[(0.0, "none")]["value"] == 22.7
    assert by_key[(0.3, "w4a4")]["mode"] == "free · w4a4" and by_key[(0.3, "none")]["mode"] == "free"


def test_report_labels_runs_by_their_remedies(tmp_path):
    """A training run with GatedNorm and an eval of it are their own line, apart from a plain run at the same rate."""
    from wemask_cli.commands.report import rows_from_document

    trained = rows_from_document("gated", {"stage": "sft", "mode": "aware", "mask_rate": 0.0, "train_loss": 3.2,
                                           "interventions": ["gated_norm"]}, tmp_path)
    plain = rows_from_document("plain", {"stage": "sft", "mode": "aware", "mask_rate": 0.0, "train_loss": 3.3}, tmp_path)
    evaluated = rows_from_document("eval", {
        "stage": "eval", "task": "perplexity",
        "results": [{"mask_rate": 0.0, "mode": "free", "metric": "perplexity", "value": 22.7, "quantize": "w4a4"}],
        "provenance": {"model": {"interventions": [{"kind": "gated_norm"}, {"kind": "pre_affine"}]}},
    }, tmp_path)
    assert trained[0]["mode"] == "aware + gated_norm" and plain[0]["mode"] == "aware"
    assert evaluated[0]["mode"] == "free + gated_norm + pre_affine · w4a4"
