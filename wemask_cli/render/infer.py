"""`wemask infer`: completions side by side."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from wemask_cli.render.common import PROMPT_CHARS, PROMPT_LINES, abbreviate, console

PROMPT_WIDTH = 24  # the prompt column's widest
SETTING_WIDTH = 18  # a completion column's narrowest: words and numbers stay whole


def completions_table(records: list[dict], width: int | None = None) -> Table | Group:
    """Prompts as rows, one column per mask setting: completions side by side (each cell abbreviated). When the
    settings do not fit `width` (the terminal's) at SETTING_WIDTH each, they are split over several tables, each
    with the prompts, rather than folded mid-word."""
    columns: dict[str, list[dict]] = {}
    for record in records:
        config = record["wemask"]
        label = "no mask" if config is None else f"r={config['mask_rate']:g}"
        columns.setdefault(label, []).append(record)
    width = width or console.width
    per_table = max(1, (width - PROMPT_WIDTH - 4) // (SETTING_WIDTH + 3))
    labels = list(columns)
    parts = [labels[i : i + per_table] for i in range(0, len(labels), per_table)]
    tables = [_table({label: columns[label] for label in part}, index, len(parts)) for index, part in enumerate(parts)]
    return tables[0] if len(tables) == 1 else Group(*tables)


def _table(columns: dict[str, list[dict]], index: int, count: int) -> Table:
    title = "Completions side by side" + (f" ({index + 1} of {count})" if count > 1 else "")
    table = Table(show_lines=True, title=title)
    table.add_column("prompt", style="bold", max_width=PROMPT_WIDTH)
    for label in columns:
        table.add_column(label, overflow="fold", min_width=SETTING_WIDTH)
    first = next(iter(columns.values()))
    cut = False
    for row, record in enumerate(first):
        prompt = record["input"]
        if isinstance(prompt, list):
            prompt = prompt[-1]["content"]
        texts = [prompt, *(column[row]["completion"].strip() for column in columns.values())]
        cells = [abbreviate(text) for text in texts]
        cut |= cells != texts
        table.add_row(*cells)
    if cut:
        table.caption = f"Long cells cut to {PROMPT_LINES} lines / {PROMPT_CHARS} characters: --output FILE keeps them whole."
    return table
