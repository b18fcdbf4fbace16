"""Every command that writes, with -o relative, absolute, `.`, `./a/../b` and a symlinked folder: after each run,
--resume and --overwrite, every user file in the folder is byte-identical and the manifest names only files that
exist and that wemask wrote (the test that would have caught a manifest naming `runs` for `-o runs/x`).
Tiny models; the full path matrix on the cheap commands, a subset on training."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from conftest import run_main
from transformers import TrainerCallback

from wemask_cli.outputs import Manifest
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
PPL_TEXT = str(ROOT / "wemask_cli" / "resources" / "eval" / "perplexity.txt")
SFT_FLAGS = ["--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none", "--max-steps", "2"]
FORMS = ["relative", "absolute", "dot", "dotdot", "symlink"]
USER_FILES = {"notes.txt": b"my notes", "runs/notes.txt": b"a trap for a cwd-relative record", "sub/deep.txt": b"deep"}


def output_arg(form: str, work: Path, monkeypatch) -> tuple[str, Path]:
    """(the -o argument, the real folder it names), the current directory set for it."""
    monkeypatch.chdir(work)
    if form == "relative":
        return "runs/x", work / "runs" / "x"
    if form == "absolute":
        return str(work / "abs" / "x"), work / "abs" / "x"
    if form == "dot":
        (work / "here").mkdir()
        monkeypatch.chdir(work / "here")
        return ".", work / "here"
    if form == "dotdot":
        (work / "a").mkdir()
        return "./a/../b", work / "b"
    real = work.parent / "real"
    real.mkdir()
    (work / "link").symlink_to(real)
    return "link", real


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def plant(folder: Path, files: dict = USER_FILES) -> dict:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return files


def remove_planted(folder: Path) -> None:
    for rel in USER_FILES:
        (folder / rel).unlink()
    for name in ("runs", "sub"):
        shutil.rmtree(folder / name)


def assert_intact(folder: Path, files: dict) -> None:
    assert {rel: (folder / rel).read_bytes() for rel in files} == files


def assert_honest(folder: Path, user: dict = USER_FILES) -> Manifest:
    """The manifest names only existing files, as wemask wrote them, and none of the user's."""
    manifest = Manifest.read(folder)
    assert manifest is not None and manifest.files
    for rel, (size, mtime) in manifest.files.items():
        info = os.lstat(folder / rel)
        assert (info.st_size, info.st_mtime_ns) == (size, mtime), rel
        assert rel not in user, rel
    assert all((folder / rel).is_dir() for rel in manifest.folders)
    assert set(manifest.top_names()) <= set(os.listdir(folder)) and "runs" not in manifest.top_names()
    return manifest


def wemask(monkeypatch, capsys, *args) -> tuple[int, str]:
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert "Traceback" not in err, err
    return code, err


def ppl(model, out, *extra):
    return ("eval", "--model", str(model), "--task", "perplexity", "--data", PPL_TEXT, "--limit", "2", "--window", "16",
            "--output", str(out), *extra)  # fmt: skip


# --- folders: eval ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_eval_folder_in_every_path_form(form, work, monkeypatch, capsys, tiny_model_dir):
    arg, folder = output_arg(form, work, monkeypatch)
    assert wemask(monkeypatch, capsys, *ppl(tiny_model_dir, arg))[0] == 0
    assert_honest(folder)
    user = plant(folder)
    for extra in ((), ("--overwrite",)):
        code, err = wemask(monkeypatch, capsys, *ppl(tiny_model_dir, arg, *extra))
        assert code == 2 and ("not empty" in err or "did not write" in err), err
        assert_intact(folder, user)
    nested = form in ("relative", "symlink")  # another wemask output inside the folder: kept
    if nested:
        assert wemask(monkeypatch, capsys, *ppl(tiny_model_dir, folder / "inner"))[0] == 0
    inner = {p.name: p.read_bytes() for p in (folder / "inner").iterdir()} if nested else {}
    remove_planted(folder)
    code, err = wemask(monkeypatch, capsys, *ppl(tiny_model_dir, arg, "--overwrite"))
    assert code == 0 and ("keeping inner" in err) == nested, err
    assert {p.name: p.read_bytes() for p in (folder / "inner").iterdir()} == inner if nested else True
    assert "inner" not in assert_honest(folder).top_names()


# --- single files: infer -o, locate --json/--plot, report ---------------------------------------------------------


def file_in(arg: str, name: str) -> str:
    return name if arg == "." else f"{arg}/{name}"


@pytest.mark.parametrize("form", FORMS)
def test_single_file_outputs_in_every_path_form(form, work, monkeypatch, capsys, tiny_model_dir):
    arg, folder = output_arg(form, work, monkeypatch)
    folder.mkdir(parents=True, exist_ok=True)
    user = plant(folder)
    prompts = plant(folder, {"prompts.txt": b"hello there\nsecond prompt\n"})
    commands = [("infer", "--model", tiny_model_dir, "-p", "hi", "--max-new-tokens", "2", "-o", file_in(arg, "out.jsonl"))]
    if form in ("dotdot", "symlink"):  # locate's files go through the same check: two forms suffice
        commands.append(("locate", "--model", tiny_model_dir, "--prompts", file_in(arg, "prompts.txt"),
                         "--json", file_in(arg, "l.json"), "--plot", file_in(arg, "l.png")))  # fmt: skip
    for command in commands:
        assert wemask(monkeypatch, capsys, *command)[0] == 0
        assert wemask(monkeypatch, capsys, *command)[0] == 2  # exists, no --overwrite
        assert wemask(monkeypatch, capsys, *command, "--overwrite")[0] == 0
        assert_intact(folder, {**user, **prompts})
    code, err = wemask(monkeypatch, capsys, "locate", "--model", tiny_model_dir, "--prompts", file_in(arg, "prompts.txt"),
                       "--json", file_in(arg, "prompts.txt"), "--overwrite")  # fmt: skip
    assert code == 2 and "is an input of this command (--prompts" in err
    assert_intact(folder, {**user, **prompts})


@pytest.mark.parametrize("form", FORMS)
def test_report_in_every_path_form(form, work, monkeypatch, capsys, tiny_model_dir):
    arg, folder = output_arg(form, work, monkeypatch)
    assert wemask(monkeypatch, capsys, *ppl(tiny_model_dir, arg))[0] == 0
    metrics = (folder / "metrics.json").read_bytes()
    report = ("report", arg, "--json", file_in(arg, "merged.json"), "--csv", file_in(arg, "merged.csv"), "--no-plot")
    code, err = wemask(monkeypatch, capsys, *report)
    assert code == 0, err
    for name in ("merged.json", "metrics.json"):  # a new file beside the run's files is fine; replacing one never is
        code, err = wemask(monkeypatch, capsys, "report", arg, "--json", file_in(arg, name), "--overwrite")
        assert code == 2 and "is an input of this command (a run directory" in err
    assert (folder / "metrics.json").read_bytes() == metrics


# --- training: sft (checkpoints on and off, --resume, --overwrite), dpo, grpo -------------------------------------


class UserWritesThenStop(TrainerCallback):
    """At step 1 the user adds a file to the run folder and the run gets SIGTERM (saves a checkpoint, stops)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            (self.folder / "during.txt").write_text("added while training")
            os.kill(os.getpid(), signal.SIGTERM)
        return control


def sft(arg, model, *extra, callbacks=None, **options):
    return run(SFTStage(), TrainOptions(model=model, output_dir=arg, dataset=DATA, **options), [*SFT_FLAGS, *extra], callbacks=callbacks)


@pytest.mark.parametrize("form", ["relative", "symlink"])
def test_sft_with_checkpoints_resume_and_overwrite(form, work, monkeypatch, tiny_model_dir):
    arg, folder = output_arg(form, work, monkeypatch)
    assert sft(arg, tiny_model_dir, "--save-steps", "1", callbacks=[UserWritesThenStop(folder)]).interrupted
    user = {"during.txt": b"added while training"}
    assert_honest(folder, user)
    user.update(plant(folder))
    sft(arg, tiny_model_dir, "--save-steps", "1", resume=True)
    manifest = assert_honest(folder, user)
    assert {"checkpoint-1", "checkpoint-2", "metrics.json"} <= set(manifest.top_names())
    assert_intact(folder, user)
    for overwrite in (False, True):
        with pytest.raises(WeMaskError):
            sft(arg, tiny_model_dir, overwrite=overwrite)
        assert_intact(folder, user)
    remove_planted(folder)
    (folder / "during.txt").unlink()
    sft(arg, tiny_model_dir, "--save-strategy", "no", overwrite=True)
    manifest = assert_honest(folder)
    assert not [n for n in os.listdir(folder) if n.startswith("checkpoint-")]


def test_sft_without_checkpoints(work, monkeypatch, tiny_model_dir):
    arg, folder = output_arg("absolute", work, monkeypatch)
    sft(arg, tiny_model_dir, "--save-strategy", "no")
    assert_honest(folder)
    user = plant(folder)
    with pytest.raises(WeMaskError, match="did not write"):
        sft(arg, tiny_model_dir, "--save-strategy", "no", overwrite=True)
    assert_intact(folder, user)


@pytest.mark.parametrize("stage", ["dpo", "grpo"])
def test_dpo_and_grpo_keep_user_files(stage, work, monkeypatch, capsys, tiny_model_dir):
    arg, folder = output_arg("relative", work, monkeypatch)
    common = ["--model", tiny_model_dir, "--output-dir", arg, "--max-steps", "1", "--report-to", "none", "--save-strategy", "no"]
    if stage == "dpo":
        flags = ["--dataset", str(ROOT / "data" / "preferences.jsonl"), "--per-device-train-batch-size", "2", "--max-length", "32"]
    else:
        flags = ["--dataset", str(ROOT / "data" / "math_problems.jsonl"), "--per-device-train-batch-size", "2",
                 "--num-generations", "2", "--max-completion-length", "4", "--no-chat-template"]  # fmt: skip
    code, err = wemask(monkeypatch, capsys, stage, *common, *flags)
    assert code == 0, err
    assert_honest(folder)
    user = plant(folder)
    for extra in ((), ("--resume",), ("--overwrite",)):
        assert wemask(monkeypatch, capsys, stage, *common, *flags, *extra)[0] == 2
        assert_intact(folder, user)
