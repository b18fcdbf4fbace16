"""Shared terminal output: the rich consoles, the rich-backed progress reporter, abbreviation, numbers, figures."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from wemask_cli.runtime.progress import LineProgress

console = Console()
err_console = Console(stderr=True)

PROMPT_LINES = 3  # tables show at most this many lines ...
PROMPT_CHARS = 200  # ... and characters of a prompt or completion


class RichReporter:
    """What `wemask_cli.runtime.progress` calls in the CLI: spinners, lines and transient bars on stderr."""

    def status(self, message: str):
        return err_console.status(message)

    def line(self, text: str) -> None:
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)

    @contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """A transient bar in a terminal; in a log, plain progress lines with an ETA (wemask_cli.runtime.progress)."""
        if not err_console.is_terminal:
            yield LineProgress(description, total, lambda text: self.line(f"wemask: {text}")).advance
            return
        with Progress(console=err_console, transient=True) as progress:
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
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    name = metric.rsplit("/", 1)[-1]
    if name.startswith(("acc", "exact_match")) or name.endswith("_rate"):
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def is_percent(metric: str) -> bool:
    return format_metric(metric, 0.5).endswith("%")


def table_width(table, fold: int = 24) -> int:
    """The columns `table` needs with each text column folded at `fold` characters at most (shorter ones whole)
    and each no-wrap (number) column whole: cells, padding and borders."""
    from rich.cells import cell_len

    total = 1
    for column in table.columns:
        texts = [str(column.header), *(str(cell) for cell in column.cells)]
        longest = max(cell_len(line) for text in texts for line in text.splitlines() or [""])
        total += (longest if column.no_wrap else min(longest, fold)) + 3
    return total


def fitting(builders: list[Callable[[], object]], width: int):
    """The first table of `builders` that fits `width` columns with its text folded no narrower than table_width's
    `fold` and no number cut (the last one otherwise: tables rich then folds to fit)."""
    for build in builders[:-1]:
        table = build()
        if table_width(table, width) <= width:
            return table
    return builders[-1]()


def use_log_axis(metric: str, values: list[float]) -> bool:
    """A log y-axis for positive values (not percentages) spanning more than 10x, e.g. perplexities."""
    positive = [v for v in values if not math.isnan(v)]
    return bool(positive) and not is_percent(metric) and min(positive) > 0 and max(positive) > 10 * min(positive)


def log_y_axis(ax) -> None:
    """A log y-axis with plain numbers on its ticks (20, 50, 100, 200, ...), also within one decade."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))


def readable_ylim(ax, values: list[float], errors: list[float]) -> None:
    """A y-range around the data and its error bars of at least 10% of the values' size (a single point is not a
    lone dot on a ±0.04 axis)."""
    low = min(v - e for v, e in zip(values, errors))
    high = max(v + e for v, e in zip(values, errors))
    size = max(abs(v) for v in values) or 1.0
    span = max(high - low, 0.1 * size)
    middle = (low + high) / 2
    ax.set_ylim(middle - 0.6 * span, middle + 0.6 * span)


def rate_axis(ax, rates) -> None:
    """The mask-rate x-axis over the rates drawn, with a margin either side (not 0 to 1 for a sweep that stops at
    0.3), ticks at each rate when they are few and apart."""
    rates = sorted(set(rates))
    if not rates:
        return
    low, high = rates[0], rates[-1]
    span = high - low
    margin = 0.08 * span if span else 0.1
    ax.set_xlim(low - margin, high + margin)
    gaps = [b - a for a, b in zip(rates, rates[1:])]
    if len(rates) <= 8 and (not gaps or min(gaps) >= span / 12):
        ax.set_xticks(rates, [f"{rate:g}" for rate in rates])
    ax.set_xlabel("mask rate r")
