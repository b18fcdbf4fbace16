"""Reading one source into rows: local files (.jsonl, .json, .parquet, .csv, text) and hub datasets.

Text is read as UTF-8 (a byte-order mark is dropped); binary content is refused on one line. JSON lines and CSV
rows keep their line (row) numbers so later checks can name the row at fault.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError, first_line

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_SNIFF_BYTES = 8192


def looks_local(spec: str) -> bool:
    """True for a path (a known suffix, ./ / ~ prefix, or anything that exists), False for a hub name."""
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


def _decode(path: Path, what: str) -> tuple[str, bool]:
    """(text, had a BOM) of a user's file; binary (NUL bytes), not UTF-8 or unreadable: one clear error."""
    try:
        raw = Path(path).read_bytes()
    except IsADirectoryError:
        raise WeMaskError(f"{what} {path} is a folder, not a file") from None
    except OSError as err:
        raise WeMaskError(f"cannot read {what} {path}: {err.strerror or err}") from None
    nul = raw.find(b"\x00", 0, _SNIFF_BYTES)
    if nul >= 0:
        raise WeMaskError(f"{what} {path} is a binary file (a NUL byte at offset {nul}), not text: give a UTF-8 text file")
    bom = raw.startswith(b"\xef\xbb\xbf")
    try:
        return raw.decode("utf-8-sig"), bom
    except UnicodeDecodeError as err:
        raise WeMaskError(f"{what} {path} is not UTF-8 text (byte {err.start} does not decode): save it as UTF-8") from None


def read_text(path: Path, what: str) -> str:
    """The text of a user's file (`what` names its flag): UTF-8, a leading BOM dropped; binary or not UTF-8: one line."""
    return _decode(path, what)[0]


def not_a_file(path: Path, what: str) -> WeMaskError:
    """The error for a data path that is not a regular file: missing, a folder, or a pipe, socket or device."""
    if os.path.isdir(path):
        return WeMaskError(f"{what} {path} is a folder, not a file")
    if os.path.exists(path):
        return WeMaskError(f"{what} {path} is not a regular file (a pipe, socket or device): save the data to a file and give that")
    return WeMaskError(f"{what} {path}: no such file")


def read_text_file(path, what: str = "--data") -> tuple[str, str]:
    """(text, reader name) of a plain text file of any name (LICENSE, notes.md); binary content is refused."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise not_a_file(path, what)
    text, bom = _decode(path, what)
    return text, "text (UTF-8 with BOM)" if bom else "text (UTF-8)"


def text_lines(text: str) -> list[str]:
    """The lines of a text or JSON-lines file, split at "\n" only (a trailing "\r" dropped): str.splitlines() also
    splits at U+2028, U+0085 and other separators that valid JSON strings may hold raw."""
    return [line.removesuffix("\r") for line in text.split("\n")]


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
    for number, line in enumerate(text_lines(text), 1):
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


def read_csv_rows(path: Path, what: str) -> tuple[str, list[tuple[int, dict]]]:
    """Rows of a .csv file as text (no guessing of numbers), numbered from 1 after the header; empty cells are None."""
    reader = csv.DictReader(io.StringIO(read_text(path, what), newline=""))
    rows = []
    try:
        for number, row in enumerate(reader, 1):
            if None in row:
                raise WeMaskError(f"{what} {path} row {number} (line {reader.line_num}) has more fields than the header")
            rows.append((number, {k: (v if v != "" else None) for k, v in row.items()}))
    except csv.Error as err:
        raise WeMaskError(f"{what} {path} is not valid CSV (line {reader.line_num}: {err})") from None
    return "row", rows


def _mixed_text_and_integers(values: list) -> bool:
    kinds = {type(v) for v in values if v is not None}
    return str in kinds and kinds <= {str, int}


def rows_to_dataset(numbered: list[tuple[int, dict]], unit: str, where: str):
    """A datasets.Dataset from numbered rows; a column mixing text and integers is read as text, other clashes named."""
    from datasets import Dataset
    from pyarrow import ArrowException

    columns = list(dict.fromkeys(key for _, row in numbered for key in row))
    data = {key: [row.get(key) for _, row in numbered] for key in columns}
    for key, values in data.items():
        if _mixed_text_and_integers(values):
            data[key] = [str(v) if isinstance(v, int) else v for v in values]
    try:
        return Dataset.from_dict(data)
    except (ArrowException, OverflowError) as err:  # type clashes (a string in one row, a list in another), huge ints
        raise WeMaskError(f"{where}: rows do not share one layout ({_clash(data, numbered, unit) or first_line(err, 200)})") from None


def _clash(data: dict, numbered: list, unit: str) -> str | None:
    """'line 3 has 'completion' as a list where line 1 has a str', for the first column of mixed types."""
    for key, values in data.items():
        first = next(((i, v) for i, v in enumerate(values) if v is not None), None)
        if first is None:
            continue
        for index, value in enumerate(values):
            if value is not None and type(value) is not type(first[1]):
                return (
                    f"{unit} {numbered[index][0]} has {key!r} as a {type(value).__name__} where {unit} "
                    f"{numbered[first[0]][0]} has a {type(first[1]).__name__}; every row needs the same field types"
                )
    return None


def load_file(path: Path, split: str | None, where: str):
    """(dataset, row labels or None) of one local data file; labels name JSON/CSV lines for later errors."""
    from datasets import Dataset

    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".csv"):
        unit, numbered = read_csv_rows(path, where) if suffix == ".csv" else read_json_rows(path, where)
        numbered = slice_local(numbered, split, f"{where} {path}")
        if not numbered:
            raise WeMaskError(f"{where} {path} holds no rows: give a file with at least one example")
        return rows_to_dataset(numbered, unit, f"{where} {path}"), [f"{unit} {n}" for n, _ in numbered]
    from datasets.exceptions import DatasetsError
    from pyarrow import ArrowException

    try:
        dataset = Dataset.from_parquet(str(path))
    except (ArrowException, DatasetsError, OSError) as err:  # not parquet, corrupt (the cause wrapped), unreadable
        reason = first_line(err.__cause__ or err, 200)
        raise WeMaskError(f"{where} {path} could not be read as parquet ({reason})") from None
    rows = slice_local(list(range(len(dataset))), split, f"{where} {path}")
    if len(rows) != len(dataset):
        dataset = dataset.select(rows)
    return dataset, None


def load_hub(name: str, split: str | None, config: str | None, where: str):
    """A hub dataset (network or a filled HF cache); failures become one line."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetsError

    from wemask_cli.runtime.hub import before_hub_fetch

    before_hub_fetch(f"{where} {name!r}")

    try:
        return load_dataset(name, config, split=split or "train")
    except (OSError, ValueError, DatasetsError, RuntimeError) as err:  # hub, network and files; a bad split or config
        if isinstance(err, RuntimeError) and "Dataset scripts are no longer supported" not in str(err):
            raise  # of RuntimeErrors only a dataset that needs a loading script is the user's choice
        raise WeMaskError(
            f"{where} {name!r} could not be loaded from the hub ({first_line(err)}); a hub name needs network access or a filled "
            f"HF cache: give a local {'/'.join(LOCAL_SUFFIXES)} file instead"
        ) from None


def content_sha256(spec) -> str | None:
    """SHA-256 of a local data file, or of a folder's files (their relative paths and bytes, in order); None for a
    hub name. Runs and evals record it, so `wemask report` tells apart data that only shares a name."""
    import hashlib

    path = Path(str(spec)).expanduser() if spec else None
    if path is None or not path.exists():
        return None
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    for file in files:
        digest.update(str(file.relative_to(path)).encode() if file != path else b"")
        digest.update(file.read_bytes())
    return digest.hexdigest()
