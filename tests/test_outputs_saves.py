"""A run's saves record only what they wrote (staged, then moved in), and --save-total-limit's rotation keeps a
checkpoint holding a file of the user's: the real SFT trainer on a tiny model."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from conftest import run_main
from transformers import TrainerCallback

from wemask_cli.outputs import MANIFEST_NAME, STAGING_NAME
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL = ["--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none", "--seed", "0", "--save-steps", "1"]


def sft(out: Path, model: str, *extra, callbacks=None, **options):
    return run(SFTStage(), TrainOptions(model=model, output_dir=str(out), dataset=DATA, **options), [*TRL, *extra], callbacks=callbacks)


def recorded(folder: Path) -> set[str]:
    data = json.loads((folder / MANIFEST_NAME).read_text())
    return set(data["files"]) | set(data["dirs"])


class WritesOnSave(TrainerCallback):
    """The user writes a note next to the checkpoint, and one inside it, as the trainer reports each save."""

    def __init__(self, folder: Path):
        self.folder, self.written = folder, []

    def on_save(self, args, state, control, **kwargs):
        for path in (self.folder / f"note-{state.global_step}.txt", self.folder / f"checkpoint-{state.global_step}" / "mine.txt"):
            if path.parent.is_dir():
                path.write_text("the user's")
                self.written.append(path)
        return control


def scribble(folder: Path, stop: threading.Event, written: list) -> None:
    """Write a new user file every few milliseconds, once the run has claimed its folder: in the run folder and in
    every checkpoint folder there."""
    i = 0
    while not stop.is_set():
        for parent in [folder, *sorted(folder.glob("checkpoint-*"))] if (folder / MANIFEST_NAME).exists() else ():
            path = parent / f"user-{i}.txt"
            try:
                path.write_text(str(i))
                written.append(path)
            except OSError:  # a checkpoint folder rotated away meanwhile
                pass
        i += 1
        stop.wait(0.003)


def test_files_written_during_saves_are_never_recorded(tmp_path, tiny_model_dir):
    folder = tmp_path / "race"
    hook = WritesOnSave(folder)
    stop, written = threading.Event(), []
    thread = threading.Thread(target=scribble, args=(folder, stop, written))
    thread.start()
    try:
        sft(folder, tiny_model_dir, "--max-steps", "4", callbacks=[hook])
    finally:
        stop.set()
        thread.join()
    names = recorded(folder)
    users = [p.relative_to(folder).as_posix() for p in written + hook.written if p.exists()]
    assert len(users) > 20 and hook.written
    assert not [name for name in users if name in names], sorted(set(users) & names)
    assert {"checkpoint-4/trainer_state.json", "checkpoint-4/wemask_run.json", "metrics.json", "README.md"} <= names
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {name: (folder / name).stat().st_mode & 0o666 for name in names if (folder / name).is_file()}
    assert {name: mode for name, mode in modes.items() if mode != 0o666 & ~umask} == {}  # safetensors alone writes 0600
    assert not (folder / STAGING_NAME).exists()


class NoteInFirstCheckpoint(TrainerCallback):
    def __init__(self, folder: Path):
        self.folder = folder

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 1:
            (self.folder / "checkpoint-1" / "note.txt").write_text("keep me")
        return control


def test_rotation_keeps_a_checkpoint_holding_a_user_file(tmp_path, tiny_model_dir, capsys):
    folder = tmp_path / "rot"
    sft(folder, tiny_model_dir, "--max-steps", "3", "--save-total-limit", "1", callbacks=[NoteInFirstCheckpoint(folder)])
    assert (folder / "checkpoint-1" / "note.txt").read_text() == "keep me"
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-3"]  # checkpoint-2 rotated
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--save-total-limit: keeping" in line]
    assert len(warnings) == 1 and "note.txt" in warnings[0], warnings
    assert "checkpoint-2" not in {name.split("/")[0] for name in recorded(folder)}


def test_no_output_replaces_a_file_of_an_input_folder(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """`infer --output copy1/…`, `locate --json c1/…`, `report c1 --json c1/…`, with --overwrite: each replaced a
    file of the model or run it read."""
    model = tmp_path / "copy1"
    shutil.copytree(tiny_model_dir, model)
    (model / "metrics.json").write_text(json.dumps({"stage": "sft", "mask_rate": 0.3, "train_loss": 1.0}))
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    weights = str(model / "model.safetensors")
    for args in (("infer", "--model", str(model), "--prompt", "hi", "--output", weights),
                 ("locate", "--model", str(model), "--json", str(model / "config.json")),
                 ("locate", "--model", str(model), "--plot", str(model / "tokenizer.json.png")),
                 ("report", str(model), "--json", weights, "--no-plot")):
        if args[-1].endswith(".png"):
            (model / "tokenizer.json.png").write_bytes(b"the user's")
            before["tokenizer.json.png"] = b"the user's"
        code, _, err = run_main(monkeypatch, capsys, *args, "--overwrite")
        assert code == 2 and "Traceback" not in err, err
        assert "is an input of this command" in err.strip().splitlines()[-1], err
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


@pytest.mark.embedded
def test_a_note_written_while_the_embedded_model_saves_survives_overwrite(tmp_path, monkeypatch, capsys):
    """The issue's run: `sft $S --save-steps 1 -o race2 &`, a note written as checkpoint-1 appears, then the same
    command with --overwrite. It deleted the note (recorded as wemask's); now the note is kept and named."""
    folder = tmp_path / "race2"
    stop, written = threading.Event(), []

    def note_when_checkpoint_appears():
        while not stop.is_set():
            if (folder / "checkpoint-1").is_dir() or (folder / STAGING_NAME / "checkpoint-1").is_dir():
                (folder / "notes.txt").write_text("notes")
                written.append(folder / "notes.txt")
                return
            stop.wait(0.005)

    args = ("sft", "--dataset", DATA, "--use-peft", "--max-length", "64", "--per-device-train-batch-size", "1", "--me-layer", "11",
            "--mask-rate", "0.3", "--max-steps", "2", "--save-steps", "1", "-o", str(folder))
    thread = threading.Thread(target=note_when_checkpoint_appears)
    thread.start()
    try:
        code, _, err = run_main(monkeypatch, capsys, *args)
    finally:
        stop.set()
        thread.join()
    assert code == 0 and written, err
    assert "notes.txt" not in recorded(folder)
    code, _, err = run_main(monkeypatch, capsys, *args, "--overwrite")
    assert code == 2 and "notes.txt" in err.strip().splitlines()[-1], err
    assert (folder / "notes.txt").read_text() == "notes" and (folder / "metrics.json").is_file()
