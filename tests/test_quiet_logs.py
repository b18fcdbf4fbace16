"""A training command's log keeps the lines that matter to the run: DeepSpeed's 'Setting accelerator to CPU' (printed
whenever a library imports DeepSpeed to see whether it is there) is dropped; `wemask -v` shows it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
NOTICE = "Setting accelerator to CPU"


def sft_log(model: str, out: Path, *first: str) -> str:
    args = [sys.executable, "-m", "wemask_cli", *first, "sft", "--model", model, "--dataset", DATA, "--max-steps", "1", "--max-length", "32",
            "--save-strategy", "no", "--report-to", "none", "-o", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


def test_deepspeeds_start_up_line_only_with_verbose(tmp_path, tiny_model_dir):
    pytest.importorskip("deepspeed")  # the line is DeepSpeed's: nothing to drop without it
    assert NOTICE not in sft_log(tiny_model_dir, tmp_path / "quiet")
    assert NOTICE in sft_log(tiny_model_dir, tmp_path / "verbose", "-v")


def test_plain_grpo_does_not_repeat_trls_vllm_version_warning(tmp_path, tiny_model_dir):
    """(vllm env) TRL warns that it supports vLLM 0.22-0.31 at each of its vLLM checks, 5 times in a GRPO run that
    does not use vLLM at all."""
    from vllm_support import require_vllm

    require_vllm()
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {n} + 1?", "answer": str(n + 1)}) + "\n" for n in range(4)))
    args = [sys.executable, "-m", "wemask_cli", "grpo", "--model", tiny_model_dir, "--dataset", str(data), "--max-steps", "1",
            "--num-generations", "2", "--per-device-train-batch-size", "2", "--max-completion-length", "4",
            "--save-strategy", "no", "--report-to", "none", "-o", str(tmp_path / "g")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "TRL currently supports vLLM versions" not in done.stdout + done.stderr


def test_lm_eval_runs_print_no_git_complaint(monkeypatch, tmp_path, capfd):
    """lm-eval's git lookup printed `fatal: not a git repository` on every eval outside a checkout."""
    pytest.importorskip("lm_eval")
    from lm_eval import evaluator

    from wemask_cli.compat.lm_eval import quiet_git_hash

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # tmp_path is no checkout, whatever holds it
    evaluator.get_git_commit_hash()
    assert "not a git repository" in capfd.readouterr().err  # lm-eval's own lookup
    with quiet_git_hash():
        assert evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == "" and evaluator.get_git_commit_hash.__module__ == "lm_eval.loggers.utils"


def test_vllm_start_up_prints_no_warnings(tmp_path, tiny_tokenizer):
    """(vllm env) `wemask infer --engine vllm` in a log: vLLM's start-up WARNING lines (about 15, some on stdout beside
    the table) and its weight-loading bar stay out, the completions table stays."""
    from conftest import make_tiny_model
    from vllm_support import require_vllm

    require_vllm()
    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer), num_attention_heads=2, num_key_value_heads=2, head_dim=32)
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer.save_pretrained(tmp_path / "tiny")
    env = {name: value for name, value in os.environ.items() if name != "VLLM_LOGGING_LEVEL"}  # vLLM's own default
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    args = [sys.executable, "-m", "wemask_cli", "infer", "--engine", "vllm", "--model", str(tmp_path / "tiny"), "-p", "Hi",
            "--max-new-tokens", "2"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Completions" in done.stdout and "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "checkpoint shards" not in done.stderr, done.stderr


def test_verbose_lets_vllm_start_up_at_its_own_level(monkeypatch, capsys):
    """`wemask -v` shows every library line: vLLM's engines then log at vLLM's default (INFO), not wemask's ERROR."""
    from conftest import run_main

    users = os.environ.pop("VLLM_LOGGING_LEVEL", None)  # vLLM's own default, whatever this shell set
    try:
        code, _, err = run_main(monkeypatch, capsys, "-v", "env")
        assert code == 0, err
        assert os.environ.get("VLLM_LOGGING_LEVEL") == "INFO"
    finally:  # what the command set stays out of the later tests
        os.environ.pop("VLLM_LOGGING_LEVEL", None)
        if users is not None:
            os.environ["VLLM_LOGGING_LEVEL"] = users
