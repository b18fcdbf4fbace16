"""Training runs lose nothing and fail loudly: output folders, divergence, typed recipes, dropped rows, a full disk,
torn checkpoints, and a train_loss that covers the whole run after a resume (issue 10)."""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.outputs import claim_output_dir
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.resolve import resolve
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL = ["--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "64", "--learning-rate", "1e-3",
       "--seed", "0", "--report-to", "none"]  # fmt: skip


def sft(out, model, *extra, dataset=DATA, callbacks=None, **options):
    options = TrainOptions(model=model, output_dir=str(out), dataset=dataset, **options)
    return run(SFTStage(), options, [*TRL, *extra], callbacks=callbacks)


def cli(monkeypatch, capsys, *args):
    code, _, err = run_main(monkeypatch, capsys, "sft", *args)
    assert "Traceback" not in err, err
    return code, err.strip().splitlines()[-1] if err.strip() else ""


# --- output folders ---------------------------------------------------------------------------------------------


def test_overwrite_into_a_folder_of_user_files_deletes_nothing(monkeypatch, capsys, tmp_path, tiny_model_dir):
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "checkpoint-500").mkdir()
    (tmp_path / "important.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    code, err = cli(monkeypatch, capsys, "--model", tiny_model_dir, "--dataset", DATA, "-o", ".", "--overwrite", "--max-steps", "1")
    assert code == 2 and "wemask did not write" in err and "important.txt" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-500", "important.txt", "metrics.json"]


def test_another_rank_does_not_take_its_own_runs_lock_for_another_run(monkeypatch, tmp_path):
    """Under a launcher rank 0 claims the folder as soon as its checks pass; a slower rank's early check then finds
    that lock (its own run's): only the main process refuses a folder in use (rank 1 refused its run's, and the
    launch hung)."""
    from wemask_cli.train.preflight import check_output_folder

    with claim_output_dir(tmp_path / "run", overwrite=False, kind="sft"):  # held by a live process, as rank 0 holds it
        with pytest.raises(WeMaskError, match="is in use by"):
            check_output_folder(tmp_path / "run")
        for name, value in (("RANK", "1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")):  # what torchrun gives rank 1
            monkeypatch.setenv(name, value)
        check_output_folder(tmp_path / "run")


def test_output_problems_are_found_before_the_data(monkeypatch, capsys, tmp_path, tiny_model_dir):
    (tmp_path / "file").write_text("x")
    missing = str(tmp_path / "no-such-data.jsonl")  # the data would fail, but the output is checked first
    code, err = cli(monkeypatch, capsys, "--model", tiny_model_dir, "--dataset", missing, "-o", str(tmp_path / "file" / "run"))
    assert code == 2 and err.endswith("file is a file, so nothing can be created under it")
    with claim_output_dir(tmp_path / "busy", overwrite=False, kind="sft"):
        code, err = cli(monkeypatch, capsys, "--model", tiny_model_dir, "--dataset", missing, "-o", str(tmp_path / "busy"))
    assert code == 2 and "is in use by" in err
    code, err = cli(monkeypatch, capsys, "--model", tiny_model_dir, "--dataset", DATA, "-o", str(tmp_path / "o"),
                    "--use-peft", "--lora-r", "0")  # fmt: skip
    assert code == 2 and "--lora-r 0 is not valid" in err


# --- typed recipes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ('use_peft: "false"\n', "line 1: use_peft must be true or false, not 'false' (a string)"),
        ("dataset: x\nuse_peft: maybe\n", "line 2: use_peft must be true or false, not 'maybe'"),
        ("lora_r: 8\nmax_steps: 3\nlora_r: 16\n", "line 3: not valid YAML (duplicate key 'lora_r' (first on line 1))"),
        ("lora_r: 8.5\n", "line 1: lora_r must be an integer, not 8.5"),
        ("lora_r: true\n", "line 1: lora_r must be an integer, not True"),
        ('packing: "no"\n', "line 1: packing must be true or false, not 'no'"),
        ("learning_rate: fast\n", "line 1: learning_rate: 'fast' is not a valid value"),
    ],
)
def test_recipe_values_are_typed(tmp_path, text, message):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    with pytest.raises(WeMaskError, match=f"^--config {recipe} " + message.replace("(", r"\(").replace(")", r"\)")):
        resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir="o"), [])


def test_recipe_folder_and_good_values(tmp_path):
    with pytest.raises(WeMaskError, match="is a folder: give a recipe .yaml file"):
        resolve(SFTStage(), TrainOptions(config=str(tmp_path), output_dir="o"), [])
    recipe = tmp_path / "r.yaml"
    recipe.write_text("\ufeffuse_peft: false\nlearning_rate: 2e-5\npacking: true\nlora_alpha: 16\nmask_rate: 0.3\n")
    resolved = resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir="o"), [])
    assert resolved.opts["use_peft"] is False and resolved.args.learning_rate == 2e-5 and resolved.args.packing is True
    assert resolved.mask.rates == [0.3]


# --- divergence, dropped rows, a full disk ----------------------------------------------------------------------


def test_a_diverged_run_stops_keeps_the_good_checkpoint_and_saves_no_model(tmp_path, tiny_model_dir):
    out = tmp_path / "nan"
    with pytest.raises(WeMaskError, match=r"training diverged at step \d+: .*not finite.*checkpoint-1, is kept"):
        sft(out, tiny_model_dir, "--learning-rate", "1e30", "--max-steps", "6", "--save-steps", "1")
    assert not (out / "model.safetensors").exists() and not (out / "metrics.json").exists()
    from safetensors.torch import load_file

    for checkpoint in out.glob("checkpoint-*"):
        weights = load_file(checkpoint / "model.safetensors")
        assert all(bool(t.isfinite().all()) for t in weights.values()), checkpoint.name


def test_sft_reports_dropped_rows_and_refuses_when_none_is_left(tmp_path, tiny_model_dir, capsys):
    long = "word " * 200
    rows = [{"prompt": long, "completion": "a"}] * 3 + [{"prompt": "hi", "completion": "there"}] * 2
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    some = sft(tmp_path / "some", tiny_model_dir, "--max-steps", "1", "--save-strategy", "no", dataset=str(data))
    assert "sft: 3 of 5 examples dropped: truncated to --max-length 64" in capsys.readouterr().err
    assert some.metrics["dropped_examples"] == 3
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    with pytest.raises(WeMaskError, match="every example lost its whole completion to --max-length 64"):
        sft(tmp_path / "none", tiny_model_dir, "--max-steps", "1", "--save-strategy", "no", dataset=str(data))


def test_a_full_disk_during_a_checkpoint_is_one_line(tmp_path, tiny_model_dir, monkeypatch):
    import torch

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if "checkpoint-2" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(WeMaskError, match="at step 2: could not write to .*: no space left on the device; the last complete checkpoint is checkpoint-1"):
        sft(tmp_path / "full", tiny_model_dir, "--max-steps", "3", "--save-steps", "1")


def test_a_file_size_limit_at_the_final_save_is_one_line_and_leaves_nothing(tmp_path, tiny_model_dir):
    """`ulimit -f 200; wemask sft ... -o DIR/run`: safetensors' write fails with EFBIG (SIGXFSZ is ignored, as
    Python does) in the final save; one line naming the limit, and the new run folder is gone again."""
    import resource
    import subprocess
    import sys

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "wemask_cli", "sft", "--model", tiny_model_dir, "--dataset", DATA, *TRL,
                           "--max-steps", "1", "--save-strategy", "no", "-o", str(out)],
                          capture_output=True, text=True, timeout=600, preexec_fn=limit_file_size)  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert last.startswith(f"wemask: error: training stopped at step 1: could not write to {out}: a file reached this process's "
                           "file-size limit; no complete checkpoint was saved: raise the file-size limit (ulimit -f) and run again"), last
    assert not out.exists()


# --- resume ---------------------------------------------------------------------------------------------------


def test_resume_skips_a_torn_checkpoint_and_train_loss_covers_the_whole_run(tmp_path, tiny_model_dir, capsys):
    from transformers import TrainerCallback

    class StopAt3(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == 3

    steps = ["--max-steps", "4", "--save-steps", "1"]
    straight = sft(tmp_path / "straight", tiny_model_dir, *steps, mask_rate="0.5", me_layer="1")
    out = tmp_path / "resumed"
    sft(out, tiny_model_dir, *steps, mask_rate="0.5", me_layer="1", callbacks=[StopAt3()])
    (out / "metrics.json").unlink()  # as if killed after saving checkpoint-3
    (out / "checkpoint-3" / "wemask_config.json").write_text('{"mask_rate": 0.5, "dims": {"1": [')  # torn
    import shutil

    shutil.rmtree(out / "checkpoint-1")
    capsys.readouterr()
    resumed = sft(out, tiny_model_dir, *steps, mask_rate="0.5", me_layer="1", resume=True)
    err = capsys.readouterr().err
    assert "skipping checkpoint-3: wemask_config.json is torn or invalid" in err and "resuming from checkpoint-2" in err
    assert resumed.metrics["global_step"] == 4
    assert [s for s, _ in resumed.metrics["loss_history"]] == [1, 2, 3, 4]
    assert resumed.metrics["train_loss"] == pytest.approx(straight.metrics["train_loss"], rel=1e-5)
    trainer_mean = next(e["train_loss"] for e in resumed.trainer.state.log_history if "train_loss" in e)
    assert not math.isclose(trainer_mean, straight.metrics["train_loss"], rel_tol=1e-3)  # TRL's own: the last 2 steps only
    json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
