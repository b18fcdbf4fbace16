"""Training data for a stage: open the source, map columns (dotted paths too), adapt known layouts (layouts.py),
detect, check."""

from __future__ import annotations

from pathlib import Path

from wemask_cli.data.columns import apply_column_map, parse_column_map
from wemask_cli.data.formats import TrainingData, check_rows, detect_format
from wemask_cli.data.layouts import adapt_layout
from wemask_cli.data.local import load_local
from wemask_cli.data.readers import load_hub, looks_local
from wemask_cli.data.replies import check_replies
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import warn

SOURCES = ".jsonl/.json/.parquet/.csv file, a folder of them (or a save_to_disk folder), or a hub dataset name"


def open_dataset(spec, *, split: str | None = "train", config: str | None = None, what: str = "--dataset"):
    """(dataset, row labels or None, where) of one split of a local file/folder or hub dataset; never empty."""
    if not spec:
        raise WeMaskError(f"no {what} given: pass a local {SOURCES}")
    spec = str(spec)
    if looks_local(spec):
        path = Path(spec).expanduser()
        dataset, labels = load_local(path, split, what, config)
        where = f"{what} {path}"
    else:
        dataset, labels = load_hub(spec, split, config, what), None
        where = f"{what} {spec!r}"
    if hasattr(dataset, "keys") and not hasattr(dataset, "column_names"):
        raise WeMaskError(f"{where} has several splits ({', '.join(dataset.keys())}): choose one with --dataset-split")
    if len(dataset) == 0:
        raise WeMaskError(f"{where} is empty: give a dataset with at least one example")
    return dataset, labels, where


def load_training_data(
    data: TrainingData,
    spec: str,
    *,
    split: str | None = "train",
    config: str | None = None,
    columns: str | dict | None = None,
    what: str = "--dataset",
):
    """(dataset, format) for a stage's TrainingData (formats.SUPERVISED, PREFERENCE, PROMPTS, a stage's own): columns
    mapped, known layouts adapted, format detected, rows checked, never empty."""
    dataset, labels, where = open_dataset(spec, split=split, config=config, what=what)
    return prepare_training_data(data, dataset, labels, where, columns)


def prepare_training_data(data: TrainingData, dataset, labels: list[str] | None, where: str, columns=None):
    """(dataset, format) of an opened dataset: columns mapped, known layouts adapted, format detected, rows and replies
    checked."""
    dataset = apply_column_map(dataset, parse_column_map(columns), where)
    adapted = adapt_layout(data, dataset, labels, where)
    dataset, fmt, labels = adapted or (dataset, detect_format(data, dataset.column_names, where), labels)
    dataset = check_rows(dataset, fmt, labels, where)
    check_replies(dataset, fmt, labels, where)
    if not fmt.keep_other_columns:
        extra = [c for c in dataset.column_names if c not in fmt.columns]
        if extra:
            dataset = dataset.remove_columns(extra)
    return dataset, fmt


def report_dropped(stage: str, before: int, after: int, reason: str, what: str = "--dataset") -> None:
    """One warning line when a stage dropped rows (`reason` says why and how to keep them); none left: one error."""
    dropped = before - after
    if dropped <= 0:
        return
    if after == 0:
        raise WeMaskError(f"{stage}: all {before} examples of {what} were dropped ({reason}): nothing is left to train on")
    warn(f"{stage}: dropped {dropped} of {before} examples of {what} ({reason}); training on {after}")
