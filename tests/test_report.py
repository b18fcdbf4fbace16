"""`wemask report`: merge eval and training metrics.json files into one table, JSON/CSV rows and one plot."""

from __future__ import annotations

import csv
import json
import os
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
    for name in ("eval-a", "eval-b", "r0.3", "perplexity", "train_loss", "aware r=0.3", "eval: perplexity, 2 run(s)", "sft, 1 run(s)"):
        assert name in stdout, name
    rows = json.loads(out_json.read_text())
    assert {r["run"].rsplit("/", 1)[-1] for r in rows} == {"eval-a", "eval-b", "r0.3"}
    ppl = [r for r in rows if r["metric"] == "perplexity"]
    assert sorted((Path(r["run"]).name, r["mask_rate"]) for r in ppl) == [
        ("eval-a", 0.0), ("eval-a", 1.0), ("eval-b", 0.0), ("eval-b", 0.5), ("eval-b", 1.0)
    ]
    assert all(r["stage"] == "eval" and r["mode"] == ("" if r["mask_rate"] else "plain") and r["task"] == "perplexity" for r in ppl)
    trained = {r["metric"]: r for r in rows if r["stage"] == "sft"}
    written = json.loads((runs / "r0.3" / "metrics.json").read_text())
    assert trained["train_loss"]["value"] == written["train_loss"] > 0 and trained["train_loss"]["mask_rate"] == 0.3
    assert trained["train_loss"]["mode"] == "aware"
    assert set(trained) == {"train_loss", "final_loss"}  # bookkeeping numbers and None values are not metrics
    assert len(list(csv.DictReader(out_csv.open()))) == len(rows)
    assert not list(tmp_path.rglob("report.png"))  # only the files asked for: no default plot beside --json/--csv


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
    assert code == 2 and "no metrics.json in" in err.splitlines()[-1] and "Traceback" not in err
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
    out_json = tmp_path / "rows.json"
    out_json.write_text("keep")
    code, _, err = run_main(monkeypatch, capsys, "report", str(run), "--json", str(out_json))
    assert code == 2 and err == f"wemask: error: --json {out_json} exists: pass --overwrite to replace it, or choose another name\n"
    assert out_json.read_text() == "keep"
    code, _, err = run_main(monkeypatch, capsys, "report", str(run), "--json", str(out_json), "--overwrite")
    assert code == 0, err
    assert json.loads(out_json.read_text())[0]["run"] == str(run) and not list(tmp_path.rglob("*.png"))


def test_report_writes_its_default_plot_into_its_own_folder_and_reruns_without_overwrite(monkeypatch, capsys, tmp_path):
    """The default plot went into the first training run's folder, so the second report was refused without
    --overwrite: it goes into report/ beside the first run, claimed like any output; a rerun of the same report
    replaces it, a report of other runs needs --overwrite, a user's file there is never replaced."""
    proj = tmp_path / "proj"
    first, second = proj / "sub1" / "a", proj / "sub2" / "b"
    for run, rate in ((first, 0.0), (second, 0.3)):
        write_training_run(run, mask_rate=rate)
    mine = proj / "report.png"
    mine.write_text("the user's plot")
    code, _, err = run_main(monkeypatch, capsys, "report", str(first), str(second), "--csv", str(proj / "table.csv"), "--overwrite")
    assert code == 0, err
    assert mine.read_text() == "the user's plot" and sorted(p.name for p in proj.rglob("*.png")) == ["report.png"]
    folder = proj / "sub1" / "report"
    for _ in range(2):  # the default plot (nothing else asked for): its own folder, replaced by a rerun without --overwrite
        code, _, err = run_main(monkeypatch, capsys, "report", str(first), str(second))
        assert code == 0, err
        assert "".join(err.split()).endswith(f"Wrote{folder / 'report.png'}") and (folder / "report.png").read_bytes()[:4] == b"\x89PNG"
        assert sorted(p.name for p in first.iterdir()) == ["metrics.json", "wemask_run.json"]  # the run's folder holds the run only
    assert json.loads((folder / "runs.json").read_text())["runs"] == sorted(str(p.resolve()) for p in (first, second))
    code, _, err = run_main(monkeypatch, capsys, "report", str(first))  # another report: refused, then --overwrite
    assert code == 2 and err.splitlines()[-1] == (
        f"wemask: error: {folder} holds the report of other runs ({os.path.relpath(first)}, {os.path.relpath(second)}): "
        "pass --overwrite to replace it, or --plot PATH"
    )
    code, _, err = run_main(monkeypatch, capsys, "report", str(first), "--overwrite")
    assert code == 0, err
    (folder / "notes.txt").write_text("the user's notes")
    for again in ((), ("--overwrite",)):
        code, _, err = run_main(monkeypatch, capsys, "report", str(first), *again)
        assert code == 2 and err.splitlines()[-1] == (
            f"wemask: error: {folder} also holds files wemask report did not write (notes.txt): move them away, or pass --plot PATH"
        )
    assert (folder / "notes.txt").read_text() == "the user's notes" and (folder / "report.png").read_bytes()[:4] == b"\x89PNG"
    (folder / "notes.txt").unlink()
    taken = write_training_run(proj / "sub3" / "report", mask_rate=0.3)  # a run named report, beside the first run
    write_training_run(proj / "sub3" / "r0", mask_rate=0.0)
    for again in ((), ("--overwrite",)):
        code, _, err = run_main(monkeypatch, capsys, "report", str(proj / "sub3" / "r0"), str(second), *again)
        assert code == 2 and err.splitlines()[-1] == (
            f"wemask: error: {taken} is not the folder of a wemask report (it holds other files): pass --plot PATH, or --no-plot"
        )
    assert sorted(p.name for p in taken.iterdir()) == ["metrics.json", "wemask_run.json"]
    code, out, err = run_main(monkeypatch, capsys, "report", *sorted(str(p) for p in (proj / "sub1").iterdir()))  # runs/*
    assert code == 0, err
    assert err.splitlines()[0] == f"wemask: skipping {folder}: the output of an earlier wemask report" and "a " in out


def test_report_goes_on_past_an_unreadable_run_and_sums_up_empty_folders(monkeypatch, capsys, tmp_path):
    runs = tmp_path / "runs"
    write_training_run(runs / "good", mask_rate=0.0)
    (runs / "torn").mkdir()
    (runs / "torn" / "metrics.json").write_text("{oops")
    for i in range(40):
        (runs / f"empty{i:02d}").mkdir()
    code, out, err = run_main(monkeypatch, capsys, "report", *sorted(str(p) for p in runs.iterdir()), "--no-plot")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "and 37 more: no metrics.json" in lines[0] and "cannot be read as JSON" in lines[1]
    assert "train_loss" in out


def test_report_skips_a_folder_without_metrics_and_goes_on(monkeypatch, capsys, tmp_path):
    """`wemask report runs/*` with an empty folder among the runs: one line for it, the rest reported."""
    runs = tmp_path / "runs"
    (runs / "empty").mkdir(parents=True)
    write_training_run(runs / "r0", mask_rate=0.0)
    code, out, err = run_main(monkeypatch, capsys, "report", str(runs / "empty"), str(runs / "r0"), "--no-plot")
    assert code == 0, err
    assert f"wemask: skipping {runs / 'empty'}: no metrics.json" in err and "train_loss" in out


# Training runs written by hand as train/records.py writes them: metrics.json and wemask_run.json.
TRL_ARGS = {"learning_rate": 5e-6, "max_steps": 100, "per_device_train_batch_size": 8, "beta": 0.1, "seed": 0,
            "output_dir": "OUT", "logging_dir": "OUT/logs", "run_name": "OUT", "save_steps": 50}


def write_training_run(folder: Path, *, stage="sft", mask_rate=0.3, mode="aware", seed=0, peft=False, ref_mask=None,
                       dataset="data/sft_chat.jsonl", remedies=(), loss=2.0, load_in_4bit=False, data_sha256=None, **trl) -> Path:
    folder.mkdir(parents=True)
    metrics = {
        "stage": stage, "status": "finished", "mode": mode, "mask_rate": mask_rate, "me_layer": 5, "select": "weight",
        "layers": "from-me", "strength": 1.0, "model": "/cache/wemask/models/SmolLM2-135M-Instruct.Q4_1-ab5632ff1665",
        "dataset": dataset, "peft": peft, "interventions": list(remedies), "seed": seed, "world_size": 1,
        "global_step": 100, "epoch": 1.0, "train_loss": loss, "final_loss": loss - 0.1, "eval_loss": None,
        "runtime_s": 12.5, "train_samples_per_second": 3.0, "train_steps_per_second": 0.4,
        "loss_history": [[1, loss + 1], [100, loss - 0.1]], "dropped_examples": 0,
    }  # fmt: skip
    if stage == "dpo":
        metrics.update(ref_mask=ref_mask, reference="adapter disabled" if peft else "copy", first_step={"loss": 0.693})
    options = {"model": None, "output_dir": str(folder), "dataset": dataset, "dataset_split": "train", "mask_rate": str(mask_rate),
               "mode": mode, "use_peft": peft, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "load_in_4bit": load_in_4bit,
               "load_in_8bit": False, "dtype": "auto", "overwrite": False, "resume": False, "gated_norm": None}  # fmt: skip
    if stage == "dpo":
        options["ref_mask"] = ref_mask
    args = {**TRL_ARGS, "seed": seed, "output_dir": str(folder), "logging_dir": f"{folder}/logs", "run_name": str(folder), **trl}
    record = {"stage": stage, "command": ["wemask", stage], "seed": seed, "world_size": 1, "model_source": metrics["model"],
              "data_format": "messages", "data_sha256": data_sha256, "interventions": [], "options": options, "trl_config_class": "SFTConfig",
              "trl_args": args, "versions": {}}  # fmt: skip
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "wemask_run.json").write_text(json.dumps(record))
    return folder


def lines_of(rows, metric="train_loss") -> dict[str, list[dict]]:
    from wemask_cli.commands.report import points

    found: dict[str, list[dict]] = {}
    for point in points(rows):
        if point["metric"] == metric:
            found.setdefault(point["line"], []).append(point)
    return found


def test_report_compares_like_with_like(tmp_path):
    """The DPO runs the issue found merged into one 'aware' point: full and LoRA, --ref-mask same and none, plain
    and HH data are four lines; only the two seeds of one setting are averaged, with their std as error bars."""
    runs = tmp_path / "runs"
    write_training_run(runs / "full-same-s0", stage="dpo", ref_mask="same", seed=0, loss=0.60)
    write_training_run(runs / "full-same-s1", stage="dpo", ref_mask="same", seed=1, loss=0.64)
    write_training_run(runs / "full-none", stage="dpo", ref_mask="none", loss=0.50)
    write_training_run(runs / "lora-same", stage="dpo", ref_mask="same", peft=True, loss=0.40)
    write_training_run(runs / "lora-same-hh", stage="dpo", ref_mask="same", peft=True, dataset="data/hh.jsonl", loss=0.30)
    rows = gather(sorted(runs.iterdir()))
    lines = lines_of(rows)
    assert sorted(lines) == sorted([
        "aware r=0.3, full, ref-mask none, data sft_chat.jsonl",
        "aware r=0.3, full, ref-mask same, data sft_chat.jsonl",
        "aware r=0.3, LoRA r=16, ref-mask same, data hh.jsonl",
        "aware r=0.3, LoRA r=16, ref-mask same, data sft_chat.jsonl",
    ])
    (averaged,) = lines["aware r=0.3, full, ref-mask same, data sft_chat.jsonl"]
    assert averaged["value"] == pytest.approx(0.62) and averaged["std"] == pytest.approx(0.0283, abs=1e-3)
    assert averaged["spread"] == "seeds" and len(averaged["runs"]) == 2
    assert all(point["spread"] is None for name, found in lines.items() if "full, ref-mask same" not in name for point in found)


def test_report_splits_runs_by_any_other_training_argument(tmp_path):
    """A learning rate (or any TRL argument besides paths, logging and seed) that differs is named in the line."""
    runs = tmp_path / "runs"
    write_training_run(runs / "a", seed=0)
    write_training_run(runs / "b", seed=1, learning_rate=1e-5)
    names = sorted(lines_of(gather(sorted(runs.iterdir()))))
    assert names == ['aware r=0.3, learning_rate=1e-05', 'aware r=0.3, learning_rate=5e-06']


def test_report_splits_data_that_only_shares_a_name(tmp_path):
    """Two files called sft_chat.jsonl with other contents are two lines; the same contents (seeds) average."""
    runs = tmp_path / "runs"
    write_training_run(runs / "a", seed=0, data_sha256="1" * 64)
    write_training_run(runs / "b", seed=1, data_sha256="1" * 64)
    write_training_run(runs / "c", seed=0, data_sha256="2" * 64)
    lines = lines_of(gather(sorted(runs.iterdir())))
    assert sorted(lines) == ["aware r=0.3, data sft_chat.jsonl#11111111", "aware r=0.3, data sft_chat.jsonl#22222222"]
    assert lines["aware r=0.3, data sft_chat.jsonl#11111111"][0]["spread"] == "seeds"


def test_report_plain_runs_quantized_runs_and_remedies_are_their_own_lines(tmp_path):
    """A run without a mask is 'plain' (not 'aware'), the r=0 point of the line it shares its settings with; remedies
    and 4-bit loading name their own lines."""
    runs = tmp_path / "runs"
    write_training_run(runs / "r0", mask_rate=0.0)
    write_training_run(runs / "r0.3", mask_rate=0.3)
    write_training_run(runs / "gated", mask_rate=0.0, remedies=["gated_norm"])
    write_training_run(runs / "q4", mask_rate=0.3, peft=True, load_in_4bit=True)
    rows = gather(sorted(runs.iterdir()))
    by_run = {Path(row["run"]).name: row["line"] for row in rows if row["metric"] == "train_loss"}
    assert by_run["r0"] == by_run["r0.3"] == "aware, full, no remedy"  # r0 is the r=0 point of the r0.3 line
    assert by_run["gated"] == "plain, full, GatedNorm"
    assert by_run["q4"] == "aware r=0.3, LoRA r=16, no remedy, 4bit"
    assert {row["mode"] for row in rows if Path(row["run"]).name in ("r0", "gated")} == {"plain"}


def eval_document(task="perplexity", data="/work/perplexity.txt", sha="a" * 64, rates=(0.0, 0.3), quantize="none", values=None):
    values = values or [22.7 + 10 * r for r in rates]
    return {
        "schema": "wemask-metrics/1", "stage": "eval", "task": task, "model": "/m", "data": data, "mode": "free",
        "mask_rates": list(rates), "results": [
            {"mask_rate": r, "mode": "free", "quantize": quantize, "seed": 0, "metric": "perplexity", "value": v, "se": 0.5, "n": 8,
             "delta": v - values[0], "delta_se": 0.1}
            for r, v in zip(rates, values)
        ],
        "settings": {"task": task, "data": data, "window": 256, "batch_size": 8, "seeds": 1},
        "provenance": {"model": {"path": "/m", "interventions": []}, "data": {"path": data, "sha256": sha}},
    }  # fmt: skip


def test_report_uses_an_eval_baseline_only_for_the_same_data(tmp_path):
    """The perplexity of README.md is its own plain line, not the r=0 baseline of runs on perplexity.txt."""
    runs = tmp_path / "runs"
    for name, document in {
        "sweep": eval_document(),
        "readme-r0": eval_document(data="/work/README.md", sha="b" * 64, rates=(0.0,), values=[40.0]),
        "window": {**eval_document(), "settings": {"window": 64}},
    }.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.json").write_text(json.dumps(document))
    lines = lines_of(gather(sorted(runs.iterdir())), "perplexity")
    assert sorted(lines) == [
        'data perplexity.txt#aaaaaaaa, window=256', 'data perplexity.txt#aaaaaaaa, window=64',
        'plain, data README.md#bbbbbbbb, window=256',
    ]


def test_report_keeps_an_eval_sweep_on_one_line_and_splits_me_layers(tmp_path):
    """A sweep's r=0 point (no ME layer applied) stays on its line; a sweep masking from another ME layer is apart."""
    runs = tmp_path / "runs"
    for name, layer in (("me11", 11), ("me5", 5)):
        document = eval_document(rates=(0.0, 0.3, 1.0))
        for result in document["results"]:
            result["me_layer"] = None if result["mask_rate"] == 0 else layer
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.json").write_text(json.dumps(document))
    lines = lines_of(gather(sorted(runs.iterdir())), "perplexity")
    assert {name: sorted(p["mask_rate"] for p in found) for name, found in lines.items()} == {
        "mask me_layer=11": [0.0, 0.3, 1.0], "mask me_layer=5": [0.0, 0.3, 1.0],
    }


def test_report_keeps_quantized_variants_apart(tmp_path):
    """A `--quantize` sweep's rows at the same rate and mode are separate rows and lines, never averaged."""
    run = tmp_path / "q"
    run.mkdir()
    results = [
        {"mask_rate": r, "mode": "free", "quantize": q, "seed": 0, "metric": "perplexity", "value": v, "se": 0.1, "n": 8}
        for r, q, v in ((0.0, "none", 22.7), (0.0, "w4a4", 11076.0), (0.3, "none", 23.3), (0.3, "w4a4", 9670.0))
    ]
    (run / "metrics.json").write_text(json.dumps({"stage": "eval", "task": "perplexity", "results": results}))
    rows = gather([run])
    by_key = {(r["mask_rate"], r["quantize"]): r for r in rows}
    assert len(rows) == 4 and by_key[(0.0, "w4a4")]["value"] == 11076.0 and by_key[(0.0, "none")]["value"] == 22.7
    assert by_key[(0.3, "w4a4")]["line"] == "w4a4" and by_key[(0.3, "none")]["line"] == "base model"
    assert {row["mode"] for row in rows if row["mask_rate"]} == {""}  # nothing was trained: no mode


def test_report_tables_fit_80_columns(monkeypatch, capsys, tmp_path):
    """Long setting names and many metrics: every line of the tables fits 80 columns, no number is cut."""
    runs = tmp_path / "runs"
    write_training_run(runs / "full-same", stage="dpo", ref_mask="same", loss=0.612345)
    write_training_run(runs / "lora-none-hh", stage="dpo", ref_mask="none", peft=True, dataset="data/hh-rlhf-helpful-base.jsonl", loss=0.4)
    from wemask_cli.render.common import console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(console, "_width", 80)  # the console read COLUMNS when it was made
    code, out, err = run_main(monkeypatch, capsys, "report", str(runs / "full-same"), str(runs / "lora-none-hh"), "--no-plot")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    for number in ("0.6123", "0.5123", "0.693"):  # train_loss, final_loss, first_step/loss: whole
        assert number in out
    assert "…" not in out


def test_report_labels_read_like_a_legend_and_duplicates_have_no_spread(tmp_path):
    """'aware r=0.3, GatedNorm both' (not `gated_norm · gated_norm="both"`); two evals of the same model and seed are
    duplicates: their mean, no ± (the issue's '22.89 ± 0'); two seeds of one setting have a spread."""
    runs = tmp_path / "runs"
    gated = write_training_run(runs / "gated", mask_rate=0.3, remedies=["gated_norm"])
    record = json.loads((gated / "wemask_run.json").read_text())
    record["options"]["gated_norm"] = "both"
    (gated / "wemask_run.json").write_text(json.dumps(record))
    write_training_run(runs / "plain-s0", mask_rate=0.0, seed=0, loss=2.0)
    write_training_run(runs / "plain-s1", mask_rate=0.0, seed=1, loss=2.2)
    for name in ("base-a", "base-b"):
        (runs / name).mkdir()
        (runs / name / "metrics.json").write_text(json.dumps(eval_document(rates=(0.0,), values=[22.89])))
    rows = gather(sorted(runs.iterdir()))
    assert lines_of(rows).keys() == {"aware r=0.3, GatedNorm both", "plain, no remedy"}
    (baseline,) = lines_of(rows)["plain, no remedy"]
    assert baseline["spread"] == "seeds" and baseline["std"] == pytest.approx(0.1414, abs=1e-3)
    ((duplicated,),) = lines_of(rows, "perplexity").values()
    assert duplicated["value"] == pytest.approx(22.89) and duplicated["spread"] is None and duplicated["duplicates"] == 1
    from wemask_cli.render.report import cell

    assert cell(duplicated) == "22.89"


def test_report_of_100_runs_is_bounded_and_its_legend_fits_the_figure(monkeypatch, capsys, tmp_path):
    """`wemask report runs/*` over 100 runs (and empty folders): a bounded table, one line for the skipped folders,
    every legend entry inside the PNG."""
    runs = tmp_path / "runs"
    for index in range(100):
        write_training_run(runs / f"run{index:03d}", mask_rate=0.3, dataset=f"data/a-long-dataset-name-number-{index % 40}.jsonl",
                           seed=index // 40, loss=2.0 + index / 100)  # fmt: skip
    for index in range(5):
        (runs / f"empty{index}").mkdir()
    code, out, err = run_main(monkeypatch, capsys, "report", *sorted(str(p) for p in runs.iterdir()))
    assert code == 0, err
    assert len(out.splitlines()) < 150 and "and 10 more setting-and-rate rows" in out
    assert err.count("skipping") == 1 and "and 2 more: no metrics.json" in err
    from wemask_cli.render.report import report_figure

    figure = report_figure(gather(sorted(p for p in runs.iterdir() if p.name.startswith("run"))))
    figure.canvas.draw()
    box, legend = figure.bbox, figure.legends[0].get_window_extent()
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and box.y0 <= legend.y0 and legend.y1 <= box.y1
