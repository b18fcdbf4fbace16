"""Training data checked before torch, TRL or datasets are imported: the path, a hub name's cached copy when the hub
is offline, a local file's split, and, from its first rows (read with the standard library), the columns
--dataset-columns names and a layout or format the stage reads. Rows this cannot read are left to the full load
(training.py), which checks every row and names the one at fault.
"""

from __future__ import annotations

import csv
import json
import os
from itertools import islice
from pathlib import Path

from wemask_cli.data.columns import check_mapped_columns, column_value, parse_column_map
from wemask_cli.data.formats import TrainingData, detect_format
from wemask_cli.data.layouts import LAYOUTS, SAMPLED_ROWS
from wemask_cli.data.local import check_local_file
from wemask_cli.data.readers import LOCAL_SUFFIXES, looks_local, slice_local
from wemask_cli.runtime.errors import WeMaskError

FIRST_ROWS = 50


def check_training_source(data: TrainingData, spec, *, split: str | None = "train", columns=None, what: str = "--dataset") -> None:
    """What `load_training_data` would refuse about `spec` that its first rows show, in the same words, at once."""
    if not spec:
        return
    spec = str(spec)
    if not looks_local(spec):
        check_hub_dataset(spec, what)
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        return  # a folder's splits and files are read by the full load
    check_local_file(path, what)
    slice_local([], split, f"{what} {path}")  # a local file's one split, 'train' or a slice of it
    rows = first_rows(path)
    if rows:
        check_layout(data, rows, columns, f"{what} {path}")


def check_hub_dataset(name: str, what: str) -> None:
    """A hub dataset with the hub offline: refused at once unless the hub cache or datasets' own cache holds it."""
    from wemask_cli.runtime.hub import offline_without_copy

    if offline_without_copy(f"{what} {name!r}", name, "dataset") and not in_datasets_cache(name):
        raise WeMaskError(
            f"{what} {name!r} could not be loaded: it is not in the Hugging Face cache and the hub is offline "
            f"(HF_HUB_OFFLINE=1, or not reachable); give a local {'/'.join(LOCAL_SUFFIXES)} file, or run once with "
            "network access to fill the cache"
        )


def in_datasets_cache(name: str) -> bool:
    """Some folder of datasets' own cache may hold `name`: one named after its namespace, or after the name itself
    (datasets writes NAMESPACE___NAME). The cache is HF_DATASETS_CACHE, else HF_HOME/datasets, as datasets reads them
    (without importing it: it takes seconds)."""
    from huggingface_hub import constants

    cache = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets").expanduser()
    prefix = name.split("/")[0].lower()
    return cache.is_dir() and any(entry.name.lower().startswith(prefix) for entry in cache.iterdir())


def first_rows(path: Path, count: int = FIRST_ROWS) -> list[dict] | None:
    """The first `count` rows of a local data file as dicts, None when they cannot be read cheaply and cleanly."""
    readers = {".jsonl": _json_rows, ".json": _json_rows, ".csv": _csv_rows, ".parquet": _parquet_rows}
    try:
        rows = readers[path.suffix.lower()](path, count)
    except (OSError, ValueError, LookupError, csv.Error, ImportError):  # the full load names the problem
        return None
    return rows if rows and all(isinstance(row, dict) for row in rows) else None


def _json_rows(path: Path, count: int) -> list:
    with path.open("rb") as file:
        head = file.read(1 << 16).lstrip(b"\xef\xbb\xbf").lstrip()
        if path.suffix.lower() == ".json" and head.startswith(b"["):
            return json.loads(path.read_text(encoding="utf-8-sig"))[:count]
        file.seek(0)
        lines = (line.decode("utf-8-sig") for line in file)
        return [json.loads(line) for line in islice((line for line in lines if line.strip()), count)]


def _csv_rows(path: Path, count: int) -> list:
    with path.open(encoding="utf-8-sig", newline="") as file:
        return [{k: (v if v != "" else None) for k, v in row.items()} for row in islice(csv.DictReader(file), count)]


def _parquet_rows(path: Path, count: int) -> list:
    from pyarrow import ArrowException, parquet

    try:
        return next(parquet.ParquetFile(path).iter_batches(batch_size=count)).to_pylist()
    except (ArrowException, StopIteration) as err:
        raise ValueError(err) from None


def mapped_row(row: dict, mapping: dict[str, str]) -> dict:
    """One row as `apply_column_map` leaves it (`mapping`: theirs -> ours): renamed, paths pulled up, clashes replaced."""
    kept = {key: value for key, value in row.items() if key not in mapping and key not in mapping.values()}
    return {**kept, **{ours: column_value(row, theirs) for theirs, ours in mapping.items()}}


def check_layout(data: TrainingData, rows: list[dict], columns, where: str) -> None:
    """The columns --dataset-columns names are there, and a registered layout or one of the stage's formats fits."""
    mapping = parse_column_map(columns)
    check_mapped_columns(rows, mapping, where)
    rows = [mapped_row(row, mapping) for row in rows]
    if data.kind is not None:
        sample = rows[:SAMPLED_ROWS]
        if any(data.kind in layout.feeds and layout.recognises(sample) for layout in LAYOUTS.entries().values()):
            return  # the layout converts it and checks its rows in the full load
    detect_format(data, list(dict.fromkeys(key for row in rows for key in row)), where)
