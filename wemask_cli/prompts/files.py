"""Prompt files (`--input`, `--prompts`): jsonl rows with 'messages', 'prompt' or 'text', or one prompt per line."""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.data import read_json_rows, read_text
from wemask_cli.data.readers import text_lines
from wemask_cli.runtime.errors import WeMaskError

PROMPT_KEYS = ("messages", "prompt", "text")  # a row's prompt is the first of these it has
PROMPT_FILE_LAYOUTS = "jsonl rows with 'messages', 'prompt' or 'text', or one prompt per line"


def read_prompt_file(path: Path, flag: str) -> list[str | list[dict]]:
    """The prompts of a file (`flag` names it in errors): a .jsonl file (or a .json list) of objects whose prompt is
    the first of 'messages', 'prompt', 'text' they have; any other file holds one prompt per non-empty line."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        prompts = [line for line in text_lines(read_text(path, flag)) if line.strip()]
        if not prompts:
            raise WeMaskError(f"{flag} {path} is empty: give {PROMPT_FILE_LAYOUTS}")
        return prompts
    unit, rows = read_json_rows(path, flag)
    if not rows:
        raise WeMaskError(f"{flag} {path} is empty: give {PROMPT_FILE_LAYOUTS}")
    prompts = []
    for number, row in rows:
        key = next((k for k in PROMPT_KEYS if k in row), None)
        if key is None:
            raise WeMaskError(f"{flag} {path} {unit} {number} has no 'messages', 'prompt' or 'text' (found {sorted(row)})")
        prompts.append(prompt_value(row[key], f"{flag} {path} {unit} {number}: {key!r}"))
    return prompts


def prompt_value(value, where: str) -> str | list[dict]:
    """A prompt read from data: a string, or a non-empty list of {'role', 'content'} messages with text values."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        return value
    raise WeMaskError(
        f"{where} must be a string or a non-empty list of {{'role': ..., 'content': ...}} objects with text values, "
        f"not {json.dumps(value)[:80]}"
    )
