"""`wemask infer`: completions side by side."""

from __future__ import annotations

from rich.table import Table

from .common import PROMPT_CHARS, PROMPT_LINES, abbreviate

from .common import PROMPT_CHARS, PROMPT_LINES, abbreviate

def completions_table(records: list[dict]) -> Table:
    """Prompts as rows, one column per mask setting: completions side by side (each cell abbreviated)."""
    columns: dict[str, list[dict]] = {}
    for record in records:
        config = record["wemask"]
        label = "no mask" if config is None else f"r={config['mask_rate']:g}"
        columns.setdefault(label, []).append(record)
    table = Table(show_lines=True, title="Completions side by side")
    table.add_column("prompt", style="bold", max_width=40)
    for label in columns:
        table.add_column(label, overflow="fold")
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
