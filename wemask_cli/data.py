"""Datasets for training and evaluation: local files or hub names, format detection per stage, clear errors.

`load_training_data(stage, spec, ...)` returns a `datasets.Dataset` and the format it was recognised as.
Local files (.jsonl, .json, .parquet, .csv) are read here; JSON lines are checked line by line first so a
broken line is reported with its number. Anything else is a hub name, loaded with `datasets.load_dataset`.

Formats are declared per stage in `FORMATS` (first match wins); a stage that needs more (GRPO's answer
column, DPO's implicit prompt) adds or reads its own columns after detection.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import WeMaskError

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class DataFormat:
    """A layout a stage accepts: the columns it needs, and whether other columns are kept."""

    name: str
    columns: tuple[str, ...]
    keep_other_columns: bool = False

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.columns)})"


FORMATS: dict[str, tuple[DataFormat, ...]] = {
    "sft": (
        DataFormat("messages", ("messages",)),
        DataFormat("prompt-completion", ("prompt", "completion")),
        DataFormat("text", ("text",)),
    ),
    "dpo": (
        DataFormat("prompt-chosen-rejected", ("prompt", "chosen", "rejected")),
        DataFormat("chosen-rejected (implicit prompt)", ("chosen", "rejected")),
    ),
    # GRPO keeps every column: reward functions receive them as keyword arguments (e.g. the reference answer).
    # The GSM8K layout (question, answer ending in '#### N') works as is: train/grpo.py turns question into prompt.
    "grpo": (
        DataFormat("prompt", ("prompt",), keep_other_columns=True),
        DataFormat("question-answer (GSM8K)", ("question", "answer"), keep_other_columns=True),
    ),
}


def is_conversation(value) -> bool:
    """A list of {'role', 'content'} messages (TRL's conversational form)."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def detect_format(stage: str, columns, where: str) -> DataFormat:
    """The first of the stage's formats whose columns are all present, or an error naming what was found."""
    if stage not in FORMATS:
        raise WeMaskError(f"no dataset formats are defined for stage {stage!r}")
    present = set(columns)
    for fmt in FORMATS[stage]:
        if set(fmt.columns) <= present:
            return fmt
    accepted = "; ".join(fmt.describe() for fmt in FORMATS[stage])
    raise WeMaskError(
        f"{where} has columns {sorted(present)}, which match no {stage} format: accepted are {accepted}. "
        "Rename columns with --dataset-columns, e.g. prompt=question,completion=answer"
    )


def parse_column_map(text: str | dict | None) -> dict[str, str]:
    """'prompt=question,completion=answer' (ours=theirs) -> {'question': 'prompt', 'answer': 'completion'}."""
    if not text:
        return {}
    pairs = text.items() if isinstance(text, dict) else (part.partition("=")[::2] for part in str(text).split(","))
    mapping = {}
    for ours, theirs in pairs:
        ours, theirs = str(ours).strip(), str(theirs).strip()
        if not ours or not theirs:
            raise WeMaskError(
                f"--dataset-columns {text!r} is not valid: use OURS=THEIRS pairs, e.g. prompt=question,completion=answer"
            )
        mapping[theirs] = ours
    return mapping


def looks_local(spec: str) -> bool:
    return spec.lower().endswith(LOCAL_SUFFIXES) or spec.startswith((".", "/", "~")) or Path(spec).expanduser().exists()


_SLICE = re.compile(r"^train(?:\[(-?\d*):(-?\d*)\])?$")


def slice_local(rows: list, split: str | None, where: str) -> list:
    """A local file has one split, 'train'; 'train[a:b]' takes a slice of its rows."""
    if split in (None, ""):
        return rows
    match = _SLICE.match(split.replace(" ", ""))
    if not match:
        raise WeMaskError(f"{where} is a local file with a single split 'train': use split 'train' or a slice like 'train[:1000]', not {split!r}")
    start, stop = (int(x) if x else None for x in match.groups())
    return rows[start:stop]


def read_text(path: Path, what: str) -> str:
    """The text of a user's file (`what` names its flag); unreadable or not UTF-8: one clear error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise WeMaskError(f"{what} {path} is not UTF-8 text (byte {err.start} does not decode): save it as UTF-8") from None
    except OSError as err:
        raise WeMaskError(f"cannot read {what} {path}: {err.strerror or err}") from None


def read_json_rows(path: Path, what: str) -> tuple[str, list[tuple[int, dict]]]:
    """Rows of a .jsonl file (or a .json list) with their line (item) numbers, each checked to be an object."""
    text = read_text(path, what)
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise WeMaskError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
        for index, row in enumerate(data, 1):
            if not isinstance(row, dict):
                raise WeMaskError(f"{path} item {index} is a JSON {type(row).__name__}, not an object with named fields")
        return "item", list(enumerate(data, 1))
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise WeMaskError(f"{path} line {number} is not valid JSON ({err.msg}, column {err.colno})") from None
        if not isinstance(row, dict):
            raise WeMaskError(f"{path} line {number} is a JSON {type(row).__name__}, not an object with named fields")
        rows.append((number, row))
    return "line", rows


def load_local(path: Path, split: str | None, where: str):
    """A datasets.Dataset from a local file, plus each row's line number for JSON lines (else None)."""
    from datasets import Dataset

    if not path.is_file():
        raise WeMaskError(f"{where} {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise WeMaskError(f"{where} {path}: unsupported file type {suffix!r}; use {', '.join(LOCAL_SUFFIXES)} or a hub dataset name")
    if suffix in (".jsonl", ".json"):
        unit, numbered = read_json_rows(path, where)
        numbered = slice_local(numbered, split, f"{where} {path}")
        if not numbered:
            raise WeMaskError(f"{where} {path} holds no rows: give a file with at least one example")
        columns = list(dict.fromkeys(key for _, row in numbered for key in row))
        data = {key: [row.get(key) for _, row in numbered] for key in columns}
        try:
            return Dataset.from_dict(data), [f"{unit} {n}" for n, _ in numbered]
        except Exception as err:  # pyarrow type clashes: a field that is a string in one row, a list in another
            reason = str(err).strip().splitlines()[0][:200]
            raise WeMaskError(f"{where} {path}: rows do not share one layout ({reason}); every row needs the same field types") from None
    try:
        dataset = Dataset.from_parquet(str(path)) if suffix == ".parquet" else Dataset.from_csv(str(path))
    except Exception as err:
        reason = str(err).strip().splitlines()[0][:200]
        raise WeMaskError(f"{where} {path} could not be read as {suffix[1:]} ({reason})") from None
    rows = slice_local(list(range(len(dataset))), split, f"{where} {path}")
    if len(rows) != len(dataset):
        dataset = dataset.select(rows)
    return dataset, None


def load_hub(name: str, split: str | None, config: str | None, where: str):
    from datasets import load_dataset

    try:
        return load_dataset(name, config, split=split or "train")
    except Exception as err:
        reason = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise WeMaskError(
            f"{where} {name!r} could not be loaded from the hub ({reason}); a hub name needs network access or a filled "
            f"HF cache: give a local {'/'.join(LOCAL_SUFFIXES)} file instead"
        ) from None


def check_rows(dataset, fmt: DataFormat, line_numbers: list[str] | None, where: str) -> None:
    """Every row has the format's columns filled; conversations are lists of role/content messages."""
    if line_numbers is None:
        return
    for column in fmt.columns:
        for index, value in enumerate(dataset[column]):
            line = line_numbers[index]
            if value is None or value == "" or value == []:
                raise WeMaskError(f"{where} {line} has no {column!r} (format {fmt.name} needs {', '.join(fmt.columns)})")
            if isinstance(value, list) and not is_conversation(value):
                raise WeMaskError(
                    f"{where} {line}: {column!r} is a list but not a conversation of {{'role', 'content'}} messages"
                )


def load_training_data(
    stage: str,
    spec: str,
    *,
    split: str | None = "train",
    config: str | None = None,
    columns: str | dict | None = None,
    what: str = "--dataset",
):
    """(dataset, format) for `stage`: renamed columns, format detected, unneeded columns dropped, never empty."""
    if not spec:
        raise WeMaskError(f"no {what} given: pass a local .jsonl/.json/.parquet/.csv file or a hub dataset name")
    spec = str(spec)
    if looks_local(spec):
        path = Path(spec).expanduser()
        dataset, line_numbers = load_local(path, split, what)
        where = f"{what} {path}"
    else:
        dataset, line_numbers = load_hub(spec, split, config, what), None
        where = f"{what} {spec!r}"
    if hasattr(dataset, "keys") and not hasattr(dataset, "column_names"):
        raise WeMaskError(f"{where} has several splits ({', '.join(dataset.keys())}): choose one with --dataset-split")
    rename = parse_column_map(columns)
    missing = sorted(set(rename) - set(dataset.column_names))
    if missing:
        raise WeMaskError(f"--dataset-columns names {missing}, which {where} does not have (it has {dataset.column_names})")
    clashes = sorted(set(rename.values()) & (set(dataset.column_names) - set(rename)))
    if clashes:
        dataset = dataset.remove_columns(clashes)
    if rename:
        dataset = dataset.rename_columns(rename)
    if len(dataset) == 0:
        raise WeMaskError(f"{where} is empty: give a dataset with at least one example")
    fmt = detect_format(stage, dataset.column_names, where)
    check_rows(dataset, fmt, line_numbers, where)
    if not fmt.keep_other_columns:
        extra = [c for c in dataset.column_names if c not in fmt.columns]
        if extra:
            dataset = dataset.remove_columns(extra)
    return dataset, fmt
