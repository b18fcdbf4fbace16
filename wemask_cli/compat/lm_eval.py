"""lm-evaluation-harness internals (verified on lm-eval 0.4.13).

`simple_evaluate` records the git commit of the current directory by running `git describe --always` with git's
stderr left on the terminal: outside a git checkout every eval prints `fatal: not a git repository`. `quiet_git_hash`
swaps the evaluator's `get_git_commit_hash` for one that asks git the same with its stderr discarded.
"""

from __future__ import annotations

import contextlib
import subprocess

from wemask_cli.compat import require

LIBRARY = "lm-eval"
VERIFIED = {LIBRARY: ("0.4", "0.4")}  # the release series this module was verified on


def git_commit_hash() -> str | None:
    """The current directory's git commit (lm-eval's `git_hash`), None outside a checkout, git's complaints discarded."""
    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()  # noqa: S607
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


@contextlib.contextmanager
def quiet_git_hash():
    """While lm-eval evaluates: its git lookup without `fatal: not a git repository` on the terminal."""
    from lm_eval import evaluator

    original = require(LIBRARY, evaluator, "get_git_commit_hash", verified=VERIFIED)
    evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = original
