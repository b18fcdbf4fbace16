"""`wemask --help`, every `wemask CMD --help` and usage errors answer without torch, transformers or TRL:
run with those made unimportable."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCKED = ("torch", "transformers", "trl")
RUN_BLOCKED = f"""
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is blocked in this test")

sys.meta_path.insert(0, Blocker())
from wemask_cli.cli import main
sys.argv = ["wemask", *sys.argv[1:]]
main()
"""
COMMANDS = ("infer", "locate", "sft", "dpo", "grpo", "rloo", "eval", "report")


def wemask_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_BLOCKED, *args], capture_output=True, text=True, timeout=60)


def test_the_blocker_blocks():
    done = subprocess.run([sys.executable, "-c", RUN_BLOCKED.replace("from wemask_cli.cli import main", "import torch")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0 and "torch is blocked" in done.stderr


@pytest.mark.parametrize("args", [("--help",), *((command, "--help") for command in COMMANDS)], ids=" ".join)
def test_help_needs_no_torch(args):
    done = wemask_without_torch(*args)
    assert done.returncode == 0 and "Usage: wemask" in done.stdout, done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("sft", "--mask-rate", "abc"), "--mask-rate 'abc': 'abc' is not a number"),
        (("dpo", "--me-layer", "x"), "--me-layer 'x' is not valid"),
        (("infer", "-p", "hi", "--mask-rate", "2"), "--mask-rate 2 is out of range"),
        (("infer", "--batch-size", "many"), "Invalid value for '--batch-size'"),
        (("locate", "--no-such-flag"), "No such option: --no-such-flag"),
        (("evaluate",), "No such command 'evaluate'"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_usage_errors_need_no_torch(args, message):
    done = wemask_without_torch(*args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stderr.startswith("wemask: error: ") and not done.stdout
