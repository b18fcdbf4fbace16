"""Shared terminal output: the rich consoles, the rich-backed progress reporter, abbreviation, numbers, figures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

console = Console()
err_console = Console(stderr=True)

PROMPT_LINES = 3  # tables show at most this many lines ...
PROMPT_CHARS = 200  # ... and characters of a prompt or completion


class RichReporter:
    """What `wemask_cli.progress` calls in the CLI: spinners, lines and transient bars on stderr."""

    def status(self, message: str):
        return err_console.status(message)

    def line(self, text: str) -> None:
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)

    @contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        with Progress(console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task_id, n)


def abbreviate(text: str, lines: int = PROMPT_LINES, chars: int = PROMPT_CHARS) -> str:
    """At most `lines` lines and `chars` characters of `text`, with '…' where it was cut."""
    kept = text.splitlines()[:lines]
    short = "\n".join(kept)
    if len(short) > chars:
        short = short[: chars - 1]
    return short + "…" if short != text.rstrip("\n") else short


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as PNG (creating folders) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def num(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def compact(value) -> str:
    """Short numbers: 23600 -> 23.6k, 152.3 -> 152, 0.9951 -> 0.99."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.2f}"


def format_metric(metric: str, value) -> str:
    """Accuracies and rates (fractions) as percentages, the rest with 4 significant digits."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    name = metric.rsplit("/", 1)[-1]
    if name.startswith(("acc", "exact_match")) or name.endswith("_rate"):
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def is_percent(metric: str) -> bool:
    return format_metric(metric, 0.5).endswith("%")
