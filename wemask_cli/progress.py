"""Status lines and progress for core modules, without rich or torch: the CLI installs a rich-backed reporter.

Core code calls `status`, `say`, `warn` and `task`; by default they print plain lines on stderr (spinners and
bars are no-ops), and on a distributed run only the main process speaks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext


def is_main_process() -> bool:
    """True unless torchrun/accelerate says this is not rank 0 (RANK, else LOCAL_RANK)."""
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) == "0"


class PlainReporter:
    """The default: messages as plain lines on stderr; no spinner, no bar."""

    def status(self, message: str) -> AbstractContextManager:
        return nullcontext()

    def line(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    @contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        yield lambda n=1: None


_reporter = PlainReporter()


def set_reporter(reporter) -> None:
    """Install a reporter with `status(message)`, `line(text)` and `task(description, total)` (None: the plain one)."""
    global _reporter
    _reporter = reporter or PlainReporter()


def status(message: str) -> AbstractContextManager:
    """A spinner with this message while the block runs (in the CLI); a no-op elsewhere."""
    return _reporter.status(message) if is_main_process() else nullcontext()


def say(message: str) -> None:
    """One info line on stderr: 'wemask: MESSAGE' (main process only)."""
    if is_main_process():
        _reporter.line(f"wemask: {message}")


def warn(message: str) -> None:
    """One warning line on stderr: 'wemask: warning: MESSAGE' (main process only)."""
    if is_main_process():
        _reporter.line(f"wemask: warning: {message}")


def task(description: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
    """A progress bar of `total` units (in the CLI); yields advance(n)."""
    if not is_main_process():
        return PlainReporter().task(description, total)
    return _reporter.task(description, total)
