"""Reading a task's examples: bundled sets, local files and folders, plain text of any name, hub datasets.

Columns are found by name (the first of the task's candidates for that role, its `columns`, that every row has) or
given with the --*-field flags, which accept dotted paths into nested records (`reward_model.ground_truth`). Every problem is one
line naming the row at fault, raised before any model is loaded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli.compat.datasets import fingerprint as dataset_fingerprint
from wemask_cli.data import (
    LOCAL_SUFFIXES,
    check_column,
    column_value,
    content_sha256,
    is_conversation,
    load_hub,
    load_local,
    looks_local,
    nested_columns,
    read_text_file,
)
from wemask_cli.runtime.errors import WeMaskError

TRUNCATED_NOTE = "`truncated: true` in examples.jsonl"  # said with the warning of every cut eval prompt

@dataclass
class EvalData:
    """A task's examples, normalized: texts (perplexity) or rows (question/choices/answer/prompt), and provenance:
    `path` (the file or folder read, None for a hub dataset), `sha256` (of a file), `reader` (how it was read)."""

    task: str
    where: str
    texts: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    sha256: str | None = None
    reader: str = ""

    def __len__(self) -> int:
        return len(self.texts) if self.texts else len(self.rows)

    def provenance(self) -> dict:
        return {"source": self.where, "path": self.path, "sha256": self.sha256, "reader": self.reader, "fields": self.fields}


@dataclass
class Source:
    """What --data resolved to: rows (with labels for errors) or a text, where it came from and how it was read."""

    where: str
    rows: list[dict] | None = None
    labels: list[str] | None = None
    text: str | None = None
    path: str | None = None
    sha256: str | None = None
    reader: str = ""

    def data(self, task: str, **parts) -> EvalData:
        """The EvalData of `task` built from this source (texts= or rows=, fields=)."""
        return EvalData(task, self.where, path=self.path, sha256=self.sha256, reader=self.reader, **parts)


def open_source(spec: str | None, bundled: str, split: str | None, config: str | None, limit: int | None) -> Source:
    """Rows or text from --data (a file of any name, a folder, a hub name) or the task's bundled file."""
    if spec is None:
        from wemask_cli import resources

        with resources.as_file(f"eval/{bundled}") as path:
            source = read_path(path, f"the bundled eval/{bundled}", split)
        source.path, source.reader = f"wemask_cli/resources/eval/{bundled}", f"bundled {source.reader}"
        return source
    if looks_local(spec):
        path = Path(spec).expanduser()
        if not path.exists():
            raise WeMaskError(f"--data {path}: no such file")
        return read_path(path, f"--data {path}", split)
    where = f"--data {spec!r}" + (f" ({config})" if config else "")
    dataset = load_hub(spec, split or "test", config, "--data")
    if hasattr(dataset, "keys") and not hasattr(dataset, "column_names"):
        raise WeMaskError(f"{where} has several splits ({', '.join(dataset.keys())}): choose one with --split")
    if limit is not None and len(dataset) > limit:
        dataset = dataset.select(range(limit))
    rows = dataset.to_list()
    fingerprint = dataset_fingerprint(dataset)
    return Source(where, rows=rows, labels=[f"row {i + 1}" for i in range(len(rows))], reader=f"hub dataset (fingerprint {fingerprint})")


def read_path(path: Path, where: str, split: str | None) -> Source:
    """A local file or folder: a data file (.jsonl/.json/.csv/.parquet, a folder of them) or plain text of any name."""
    sha = content_sha256(path) if path.is_file() else None
    if path.is_file() and path.suffix.lower() not in LOCAL_SUFFIXES:
        text, reader = read_text_file(path, "--data")
        if not text.strip():
            raise WeMaskError(f"{where} is empty")
        return Source(where, text=text, path=str(path), sha256=sha, reader=reader)
    dataset, labels = load_local(path, split, "--data")
    rows = dataset.to_list()
    if not rows:
        raise WeMaskError(f"{where} holds no rows: give a dataset with at least one example")
    labels = labels or [f"row {i + 1}" for i in range(len(rows))]
    reader = path.suffix.lower().lstrip(".") if path.is_file() else "folder"
    return Source(where, rows=rows, labels=labels, path=str(path), sha256=sha, reader=reader)


def pick_field(rows: list[dict], given: str | None, candidates: tuple[str, ...], flag: str, where: str) -> str:
    """A task's column for one role: the flag's value (a name, a dotted path or a comma list; checked) or the first of
    the role's `candidates` (a comma list: several columns, one per option) that every row has."""
    if given is not None:
        for name in given.split(","):
            check_column(rows[:50], name, flag, where)
        return given
    columns = list(dict.fromkeys(key for row in rows[:50] for key in row))
    for candidate in candidates:
        if all(name in columns for name in candidate.split(",")):
            return candidate
    raise WeMaskError(
        f"{where} has none of the columns {list(candidates)} (its columns: {nested_columns(rows)}): "
        f"name the column with {flag} (dotted paths like extra_info.question work)"
    )


def require_text(value, field_name: str, label: str, where: str, messages: bool = False):
    """A non-empty text value (or, with `messages`, a list of chat messages, returned as is)."""
    if messages and is_conversation(value):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        raise WeMaskError(f"{where} {label} has no {field_name!r} value")
    if isinstance(value, (list, dict)):
        raise WeMaskError(f"{where} {label}: {field_name!r} is a {type(value).__name__}, expected text")
    return str(value)


def parse_choices(row: dict, field_name: str, label: str, where: str) -> tuple[list[str], list[str] | None]:
    """Option texts (and their labels for ARC-style {'text', 'label'} dicts)."""
    if "," in field_name:
        return [require_text(column_value(row, name), name, label, where) for name in field_name.split(",")], None
    value = column_value(row, field_name)
    labels = None
    if isinstance(value, dict) and "text" in value:
        labels = [str(x) for x in value.get("label") or []] or None
        value = value["text"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(x, (str, int, float)) for x in value):
        raise WeMaskError(f"{where} {label}: {field_name!r} must be a list of at least 2 options (or {{'text': [...]}})")
    return [str(x) for x in value], labels


def parse_answer_index(value, choices: list[str], labels: list[str] | None, label: str, where: str, field_name: str) -> int:
    """An answer given as an index, a digit string, a letter (A = 0), an option label or the option's text."""
    index = None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, (str, float)):
        text = str(value).strip()
        if labels and text in labels:
            index = labels.index(text)
        elif re.fullmatch(r"\d+", text):
            index = int(text)
        elif re.fullmatch(r"[A-Za-z]", text):
            index = ord(text.upper()) - ord("A")
        elif text in choices:
            index = choices.index(text)
    if index is None or not 0 <= index < len(choices):
        raise WeMaskError(
            f"{where} {label}: answer {value!r} in {field_name!r} is not an option index (0-{len(choices) - 1}), "
            "a letter, a label or an option's text"
        )
    return index


def text_only_error(where: str, task: str) -> WeMaskError:
    return WeMaskError(f"{where}: a plain text file works for perplexity (the text) and refusal (one prompt per line), not {task}")
