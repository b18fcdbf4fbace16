"""Status lines and progress for core modules, without rich or torch: the CLI installs a rich-backed reporter.

Core code calls `status`, `say`, `warn` and `task`; by default they print plain lines on stderr (no spinner), a
task prints a plain progress line at every 10% of its units (every unit when there are ten or fewer) with an
ETA, so logs show progress too; on a distributed run only the main process speaks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from wemask_cli.runtime.ranks import is_main_process

STEPS = 10  # a line at every tenth of the work ...
INTERVAL_S = 60.0  # ... and at least this often while units complete


def duration(seconds: float) -> str:
    """'42 s', '3 min 5 s', '1 h 02 min'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class LineProgress:
    """Counts done units and writes 'DESCRIPTION: 3/10 (30%), 12 s elapsed, ETA 28 s' at every tenth of
    `total` (every unit when total <= 10), at the end, and at least every INTERVAL_S seconds."""

    def __init__(self, description: str, total: int, write: Callable[[str], None], done: int = 0, clock=time.monotonic):
        self.description, self.total, self.write, self.clock = description, max(int(total), 0), write, clock
        self.start_done = self.done = done
        self.started = self.last_line = clock()
        self.last_step = self._step(done)

    def _step(self, done: int) -> int:
        return min(done, self.total) * STEPS // self.total if self.total else 0

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note)

    def update(self, done: int, note: str = "") -> None:
        """Set the count of done units; print a line when a tenth is crossed, the work ends or INTERVAL_S passed."""
        self.done = done
        now, step = self.clock(), self._step(done)
        due = step > self.last_step or (self.total and done >= self.total) or now - self.last_line >= INTERVAL_S
        if not due or done == self.start_done or (self.total and self.last_step >= STEPS):
            return
        self.last_step, self.last_line = step, now
        self.write(self.line(now, note))

    def line(self, now: float, note: str = "") -> str:
        elapsed = now - self.started
        text = f"{self.description}: {self.done}/{self.total}"
        if self.total:
            text += f" ({100 * self.done // self.total}%)"
        text += f", {duration(elapsed)} elapsed"
        if self.total and self.done < self.total and self.done > self.start_done:
            text += f", ETA {duration(elapsed / (self.done - self.start_done) * (self.total - self.done))}"
        return text + (f"; {note}" if note else "")


class PlainReporter:
    """The default: messages as plain lines on stderr; no spinner; tasks as progress lines (LineProgress)."""

    def status(self, message: str) -> AbstractContextManager:
        return nullcontext()

    def line(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    @contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        counter = LineProgress(description, total, lambda text: self.line(f"wemask: {text}"))
        yield counter.advance


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
    """Progress over `total` units, yielding advance(n): a bar in a terminal, else progress lines with an ETA."""
    if not is_main_process():
        return nullcontext(lambda n=1: None)
    return _reporter.task(description, total)


def lines(description: str, total: int, done: int = 0) -> LineProgress:
    """A LineProgress that speaks through `say` (for callers that count outside a `with` block, e.g. training steps)."""
    return LineProgress(description, total, say, done=done)
