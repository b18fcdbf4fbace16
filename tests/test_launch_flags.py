"""`wemask sft ... --num_processes 2 --accelerate_config ddp` launches itself through accelerate, as `trl sft` does:
the same run (same losses) as `accelerate launch --config_file ... -m wemask_cli sft ...`; what accelerate would not
run as asked, and a launch flag on a command that runs in one process, are one line each."""

from __future__ import annotations

import importlib.resources
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_main
from test_startup import wemask_without_torch

from wemask_cli import resources

ROOT = Path(__file__).resolve().parent.parent
DATASET = str(ROOT / "data" / "sft_chat.jsonl")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}  # as the other 2-process tests run


def sft_args(model: str, out: Path) -> list[str]:
    return ["sft", "--model", model, "--dataset", DATASET, "--max-steps", "2", "--per-device-train-batch-size", "2",
            "--max-length", "48", "--logging-steps", "1", "--save-strategy", "no", "--report-to", "none", "--seed", "3",
            "-o", str(out)]  # fmt: skip


def test_launch_flags_run_what_accelerate_launch_runs(tmp_path, tiny_model_dir):
    """Two gloo processes each way; the launching process itself writes nothing."""
    ours = [sys.executable, "-m", "wemask_cli", *sft_args(tiny_model_dir, tmp_path / "flags"), "--num_processes", "2",
            "--accelerate_config", "ddp"]  # fmt: skip
    with resources.as_file("accelerate/ddp.yaml") as ddp:
        theirs = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ddp), "--num_processes", "2",
                  "-m", "wemask_cli", *sft_args(tiny_model_dir, tmp_path / "accelerate")]  # fmt: skip
        runs = [subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600, cwd=tmp_path) for cmd in (ours, theirs)]
    for done in runs:
        assert done.returncode == 0 and "Traceback" not in done.stderr, (done.stdout + done.stderr)[-4000:]
    flags, accelerate = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("flags", "accelerate"))
    assert flags["world_size"] == accelerate["world_size"] == 2
    losses = [[loss for _, loss in metrics["loss_history"]] for metrics in (flags, accelerate)]
    assert len(losses[0]) == 2 and losses[0] == pytest.approx(losses[1], rel=1e-6)
    record = json.loads((tmp_path / "flags" / "wemask_run.json").read_text())["distributed"]
    assert record["launcher"] == "accelerate launch" and record["sharding"]["value"] == "DDP"
    assert sorted(p.name for p in (tmp_path / "flags").iterdir()) == sorted(p.name for p in (tmp_path / "accelerate").iterdir())
    assert (runs[0].stdout + runs[0].stderr).count("wemask: saved to") == 1


def test_help_lists_the_launch_flags(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "sft", "--help")
    assert code == 0 and "Launch (accelerate)" in out
    assert all(flag in out for flag in ("--num_processes", "--accelerate_config", "--main_process_ip", "--mixed_precision"))


def one_line_refusal(monkeypatch, capsys, tmp_path, *launch: str) -> str:
    out = tmp_path / "run"
    code, stdout, stderr = run_main(monkeypatch, capsys, *sft_args("unused-model", out)[:-2], "-o", str(out), *launch)
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("wemask: error: ") and not out.exists(), stderr
    return stderr


def test_an_unknown_preset_is_one_line_naming_the_presets(monkeypatch, capsys, tmp_path):
    line = one_line_refusal(monkeypatch, capsys, tmp_path, "--num_processes", "2", "--accelerate_config", "zero9")
    assert "--accelerate_config 'zero9' is neither a file nor a preset" in line
    assert "ddp, fsdp, zero2, zero3" in line and "multi_gpu" in line


def test_a_gpu_preset_on_the_cpu_names_the_one_that_runs(monkeypatch, capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("FSDP1 runs on these GPUs")
    line = one_line_refusal(monkeypatch, capsys, tmp_path, "--num_processes", "2", "--accelerate_config", "fsdp1")
    assert "runs FSDP1, which needs GPUs: on the CPU use --accelerate_config fsdp (FSDP2)" in line


@pytest.mark.parametrize("launch", [["--num_processes", "2"], ["--cpu", "--num_processes", "2"],
                                    ["--num_processes", "2", "--accelerate_config", "single_gpu"]], ids=" ".join)  # fmt: skip
def test_processes_that_accelerate_would_start_as_one_are_refused(launch, monkeypatch, capsys, tmp_path):
    """accelerate launch starts one process for these, without a word."""
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() > 1 and launch == ["--num_processes", "2"]:
        pytest.skip("with several GPUs accelerate starts one process per GPU")
    line = one_line_refusal(monkeypatch, capsys, tmp_path, *launch)
    assert "--num_processes 2 with" in line and "starts one process" in line and "--accelerate_config ddp" in line


def test_two_names_for_the_config_and_accelerates_own_checks_are_one_line(monkeypatch, capsys, tmp_path):
    line = one_line_refusal(monkeypatch, capsys, tmp_path, "--accelerate_config", "ddp", "--config_file", "x.yaml")
    assert "--accelerate_config and --config_file both name the accelerate config" in line
    line = one_line_refusal(monkeypatch, capsys, tmp_path, "--multi_gpu", "--num_processes", "1")
    assert "accelerate launch: You need to use at least 2 processes" in line


def test_a_mistyped_flag_is_still_no_such_option(monkeypatch, capsys, tmp_path):
    line = one_line_refusal(monkeypatch, capsys, tmp_path, "--num_proceses", "2")
    assert "No such option: --num_proceses" in line


@pytest.mark.parametrize("command", [["report", "runs"], ["merge", "run", "-o", "out"]], ids=lambda c: c[0])
def test_a_launch_flag_on_a_one_process_command_is_one_line(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = wemask_without_torch(*command, "--num_processes", "2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--num_processes is a launch flag of the training commands (wemask sft, dpo, grpo, kto, rloo) and of wemask eval, " \
           f"wemask infer, wemask locate; wemask {command[0]} runs in one process" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no folder left


def test_launch_flags_inside_a_launcher_are_refused(tmp_path, tiny_model_dir):
    """One torchrun process given --num_processes: it would start processes of its own."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "wemask_cli",
           *sft_args(tiny_model_dir, tmp_path / "run"), "--num_processes", "2", "--accelerate_config", "ddp"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
    assert done.returncode != 0 and not (tmp_path / "run").exists(), done.stderr[-3000:]
    assert "wemask: error: the launch flags start processes, and this one was started by torchrun" in done.stderr
    assert done.stderr.count("wemask: error:") == 1 and "wemask_cli/" not in done.stderr  # torchrun's own summary follows


def test_the_shipped_presets_are_the_recipes_and_say_what_trls_say():
    """recipes/accelerate links to the package's configs; zero2 and zero3 mean what TRL's presets of those names do."""
    presets = resources.accelerate_presets()
    assert sorted(presets) == sorted(p.stem for p in (ROOT / "recipes" / "accelerate").glob("*.yaml")) == ["ddp", "fsdp", "zero2", "zero3"]
    for name, item in presets.items():
        assert (ROOT / "recipes" / "accelerate" / f"{name}.yaml").read_text() == item.read_text()
    pytest.importorskip("trl")
    trl_configs = importlib.resources.files("trl.accelerate_configs")
    for name in ("zero2", "zero3"):
        assert yaml.safe_load(presets[name].read_text()) == yaml.safe_load(trl_configs.joinpath(f"{name}.yaml").read_text())
