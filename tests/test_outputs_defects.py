"""--overwrite never deletes what a user needs: one test per defect found in the output-folder code (A-G), through
the real commands on tiny models where the defect showed there."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from conftest import run_main
from transformers import TrainerCallback

from wemask_cli.outputs import (
    LOCK_NAME,
    MANIFEST_NAME,
    Manifest,
    claim_output_dir,
    read_manifest,
)
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
PPL_TEXT = str(ROOT / "wemask_cli" / "resources" / "eval" / "perplexity.txt")
TRL = ["--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none", "--seed", "0", "--max-steps", "2"]


def sft(out, model, *extra, dataset=DATA, callbacks=None, **options):
    return run(SFTStage(), TrainOptions(model=model, output_dir=str(out), dataset=dataset, **options), [*TRL, *extra], callbacks=callbacks)


def cli(monkeypatch, capsys, *args) -> tuple[int, str]:
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert "Traceback" not in err, err
    return code, err.strip().splitlines()[-1] if err.strip() else ""


def ppl(model, out, *extra):
    return ("eval", "--model", str(model), "--task", "perplexity", "--data", PPL_TEXT, "--limit", "2", "--window", "16",
            "--output", str(out), *extra)  # fmt: skip


class UserWritesThenSigterm(TrainerCallback):
    """At step 1 the user adds a file to the run folder, then the run gets SIGTERM (it saves and stops)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            (self.folder / "mynotes.txt").write_text("written by the user during training")
            os.kill(os.getpid(), signal.SIGTERM)
        return control


def test_a_relative_output_records_only_names_inside_the_run(tmp_path, monkeypatch, tiny_model_dir):
    """A: a checkpoint of `-o runs/x` was recorded as `runs` (cwd-relative joined onto the folder again)."""
    monkeypatch.chdir(tmp_path)
    sft("runs/x", tiny_model_dir, "--save-steps", "1")
    written = read_manifest(tmp_path / "runs" / "x")
    assert "runs" not in written and {"checkpoint-1", "checkpoint-2", "metrics.json"} <= set(written)
    (tmp_path / "runs" / "x" / "runs").mkdir()
    (tmp_path / "runs" / "x" / "runs" / "notes.txt").write_text("mine")
    with pytest.raises(WeMaskError, match=r"did not write \(runs/\)"):
        sft("runs/x", tiny_model_dir, overwrite=True)
    assert (tmp_path / "runs" / "x" / "runs" / "notes.txt").read_text() == "mine"


def test_record_refuses_paths_outside_and_read_ignores_them(tmp_path, capsys):
    """A (at the source): a path outside the folder, or the folder itself, is a bug when recorded, ignored when read."""
    folder = tmp_path / "run"
    with claim_output_dir(folder, overwrite=False, kind="eval") as claim:
        (tmp_path / "outside.txt").write_text("x")
        for bad in (tmp_path / "outside.txt", "../outside.txt", ".", folder, "", "a/../../outside.txt"):
            with pytest.raises(ValueError):
                claim.record(bad)
        with pytest.raises(ValueError, match="does not exist"):
            claim.record("run/metrics.json")  # a cwd-relative path joined onto the folder
    (folder / "victim.txt").write_text("user")
    manifest = {"written": ["..", "victim.txt"], "files": {"../outside.txt": {"size": 1, "mtime_ns": 1}, "/etc/passwd": {"size": 1, "mtime_ns": 1}},
                "dirs": ["..", "."]}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert Manifest.read(folder).files == {} and Manifest.read(folder).folders == set()
    assert "ignoring the entry '../outside.txt'" in capsys.readouterr().err
    with pytest.raises(WeMaskError, match="did not write"):
        claim_output_dir(folder, overwrite=True, kind="eval")
    assert (tmp_path / "outside.txt").exists() and (folder / "victim.txt").exists()


def test_b_overwrite_refuses_to_delete_its_own_input(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """B: `eval --model x -o x --overwrite` and `sft --model x -o x --overwrite` deleted the model, then failed."""
    run_dir = tmp_path / "run"
    sft(run_dir, tiny_model_dir, "--max-steps", "1", use_peft=True)
    data = run_dir / "data.jsonl"
    shutil.copy(DATA, data)
    before = sorted(p.name for p in run_dir.iterdir())
    code, err = cli(monkeypatch, capsys, *ppl(run_dir, run_dir, "--overwrite"))
    assert code == 2 and err.endswith(
        f"--model {run_dir} is inside --output {run_dir}, which --overwrite would clear: write to another folder, or copy the input out first"
    )
    code, err = cli(monkeypatch, capsys, "sft", "--model", str(run_dir), "--dataset", DATA, "-o", str(run_dir), "--overwrite", *TRL)
    assert code == 2 and "--model" in err and "is inside --output-dir" in err
    with pytest.raises(WeMaskError, match="--dataset .*data.jsonl is inside"):
        sft(run_dir, tiny_model_dir, dataset=str(data), overwrite=True)
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_c_a_file_added_during_training_is_never_recorded(tmp_path, tiny_model_dir, capsys):
    """C: the user's file, added mid-run, was recorded at the release and deleted by a later --overwrite."""
    folder = tmp_path / "r"
    result = sft(folder, tiny_model_dir, callbacks=[UserWritesThenSigterm(folder)])
    assert result.interrupted and "mynotes.txt" not in read_manifest(folder)
    sft(folder, tiny_model_dir, resume=True)
    assert "mynotes.txt" not in read_manifest(folder) and (folder / "metrics.json").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for dataset in (str(bad), DATA):
        with pytest.raises(WeMaskError):
            sft(folder, tiny_model_dir, dataset=dataset, overwrite=True)
        assert (folder / "mynotes.txt").read_text() == "written by the user during training"


def test_d_the_old_output_survives_an_overwrite_with_bad_data(tmp_path, tiny_model_dir):
    """D: `--overwrite --dataset bad.jsonl` deleted the old output, then reported the data error."""
    folder = tmp_path / "r"
    sft(folder, tiny_model_dir, "--max-steps", "1")
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"unknown": 1}) + "\n")
    with pytest.raises(WeMaskError, match="bad.jsonl"):
        sft(folder, tiny_model_dir, dataset=str(bad), overwrite=True)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != MANIFEST_NAME} == {
        k: v for k, v in before.items() if k != MANIFEST_NAME
    }


def test_d_eval_keeps_the_old_output_when_the_model_cannot_load(tmp_path, monkeypatch, capsys, tiny_model_dir):
    out = tmp_path / "o"
    assert cli(monkeypatch, capsys, *ppl(tiny_model_dir, out))[0] == 0
    metrics = (out / "metrics.json").read_bytes()
    code, _ = cli(monkeypatch, capsys, *ppl(tmp_path / "no-such-model", out, "--overwrite"))
    assert code == 2 and (out / "metrics.json").read_bytes() == metrics


@pytest.mark.parametrize("pid", [2**63, 2**31, -1, 0, "12", True])
def test_e_a_lock_with_an_impossible_pid_is_explained_and_taken_over(tmp_path, capsys, pid):
    folder = tmp_path / "o"
    folder.mkdir()
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": os.uname().nodename, "command": "wemask eval"}))
    with claim_output_dir(folder, overwrite=False, resume=True, kind="eval"):
        pass
    assert "no valid process id" in capsys.readouterr().err


@pytest.mark.parametrize("written", ["ab", [1, 2], {"a": 1}, None])
def test_e_a_malformed_manifest_deletes_nothing(tmp_path, capsys, written):
    folder = tmp_path / "o"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / name).write_text(name)
    (folder / MANIFEST_NAME).write_text(json.dumps({"written": written, "files": {"a": {"size": 1, "mtime_ns": 0}}}))
    with pytest.raises(WeMaskError, match="did not write"):
        claim_output_dir(folder, overwrite=True, kind="eval")
    assert (folder / "a").read_text() == "a" and (folder / "b").read_text() == "b"
    assert "is not a list of names: ignored" in capsys.readouterr().err


def test_f_a_refused_command_removes_the_folder_it_created(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """F: a command refused after the claim left an empty folder (and its parents) behind."""
    out = tmp_path / "new" / "deeper" / "o"
    code, _ = cli(monkeypatch, capsys, *ppl(tmp_path / "no-such-model", out))
    assert code == 2 and not (tmp_path / "new").exists()
    with pytest.raises(WeMaskError):
        sft(out, tiny_model_dir, dataset=str(tmp_path / "missing.jsonl"))
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "mine"
    existing.mkdir()
    with pytest.raises(WeMaskError):
        sft(existing, tiny_model_dir, dataset=str(tmp_path / "missing.jsonl"))
    assert existing.is_dir() and os.listdir(existing) == []  # not created by the command: kept, as it was


def test_f_a_failure_after_writing_keeps_the_folder(tmp_path):
    folder = tmp_path / "o"
    with pytest.raises(RuntimeError), claim_output_dir(folder, overwrite=False, kind="eval") as claim:
        (folder / "part.json").write_text("{}")
        claim.record("part.json")
        raise RuntimeError("failed after writing")
    assert read_manifest(folder) == ["part.json"] and not (folder / LOCK_NAME).exists()


def test_g_an_eval_inside_a_run_is_kept_by_its_overwrite(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """G: the README's sweep layout: an eval inside a run folder made the run's --overwrite refuse."""
    monkeypatch.chdir(tmp_path)
    run_dir = Path("runs/sweep/r0.1")
    assert cli(monkeypatch, capsys, *ppl(tiny_model_dir, run_dir / "eval"))[0] == 0
    eval_files = {p.name: p.read_bytes() for p in (run_dir / "eval").iterdir()}
    code, err = cli(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "--output-dir", str(run_dir), "--overwrite", *TRL)
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in (run_dir / "eval").iterdir()} == eval_files
    assert "eval" not in read_manifest(run_dir) and (run_dir / "metrics.json").exists()
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "--output-dir", str(run_dir), "--overwrite", *TRL)
    assert code == 0 and f"--overwrite: keeping eval in {run_dir}: written by another wemask command" in err
    assert {p.name: p.read_bytes() for p in (run_dir / "eval").iterdir()} == eval_files


def test_overwrite_keeps_a_file_changed_since_wemask_wrote_it(tmp_path):
    folder = tmp_path / "o"
    with claim_output_dir(folder, overwrite=False, kind="eval") as claim:
        (folder / "metrics.json").write_text("{}")
        (folder / "sub").mkdir()
        (folder / "sub" / "a.txt").write_text("a")
        claim.record("metrics.json", "sub")
    (folder / "metrics.json").write_text('{"edited": "by the user"}')
    with pytest.raises(WeMaskError, match=r"metrics.json \(changed since wemask wrote it\)"):
        claim_output_dir(folder, overwrite=True, kind="eval")
    (folder / "metrics.json").unlink()
    (folder / "sub" / "b.txt").write_text("user")  # inside a folder wemask wrote
    with pytest.raises(WeMaskError, match="sub/b.txt"):
        claim_output_dir(folder, overwrite=True, kind="eval")
    assert (folder / "sub" / "b.txt").read_text() == "user" and (folder / "sub" / "a.txt").exists()


def test_deleting_never_follows_a_symlink_out_of_the_folder(tmp_path):
    folder, outside = tmp_path / "o", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    with claim_output_dir(folder, overwrite=False, kind="eval") as claim:
        (folder / "sub").mkdir()
        (folder / "sub" / "precious.txt").write_text("keep")
        claim.record("sub")
    shutil.rmtree(folder / "sub")
    (folder / "sub").symlink_to(outside)  # the user replaced wemask's folder with a link
    with pytest.raises(WeMaskError, match="sub"):
        claim_output_dir(folder, overwrite=True, kind="eval")
    assert (outside / "precious.txt").read_text() == "keep"
