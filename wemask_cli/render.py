"""Terminal output (rich tables) and machine-readable output (JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def completions_table(records: list[dict]) -> Table:
    """Prompts as rows, one column per mask setting: completions side by side."""
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
    for row, record in enumerate(first):
        prompt = record["input"]
        if isinstance(prompt, list):
            prompt = prompt[-1]["content"]
        table.add_row(prompt, *(column[row]["completion"].strip() for column in columns.values()))
    return table


def write_json(data, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
