"""A folder given as a dataset: a `datasets.save_to_disk` folder, or a folder of data files (a hub snapshot).

Files are grouped into splits by the split name in their file or folder name (`train-00000-of-00002.parquet`,
`data/test.jsonl`, `main/validation/…`); a folder whose files name no split holds one split, 'train'.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from wemask_cli.data.readers import LOCAL_SUFFIXES, load_file, slice_local
from wemask_cli.runtime.errors import WeMaskError, first_line

_SPLIT_WORD = re.compile(r"(?:^|[-_./])(train|test|validation|valid|dev|eval)(?=$|[-_./\d])", re.IGNORECASE)
_SPLIT_CALL = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*(\[.*\])?\s*$")


def _split_parts(split: str | None) -> tuple[str, str]:
    """'test[:100]' -> ('test', 'train[:100]'): the split's name, and its slice in slice_local's terms."""
    match = _SPLIT_CALL.match(split or "train")
    if not match:
        raise WeMaskError(f"--dataset-split {split!r} is not a split name or a slice like 'train[:1000]'")
    return match.group(1), "train" + (match.group(2) or "")


def _saved_folder(path: Path, split: str | None, where: str):
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk (the split chosen by name)."""
    from datasets import load_from_disk
    from pyarrow import ArrowException

    name, local_slice = _split_parts(split)
    if (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        except (OSError, ValueError, AttributeError) as err:  # unreadable, not JSON (or not UTF-8), not a JSON object
            raise WeMaskError(f"{where} {path}/dataset_dict.json is not a saved DatasetDict's ({first_line(err, 200)})") from None
        if name not in splits:
            raise WeMaskError(f"{where} {path} (a saved DatasetDict) has no split {name!r}: it has {', '.join(splits)}")
        path = path / name
    try:
        dataset = load_from_disk(str(path))
    except (OSError, ValueError, KeyError, ArrowException) as err:  # missing or corrupt files, a state.json's keys
        raise WeMaskError(f"{where} {path} could not be read as a saved dataset ({str(err).strip()[:200]})") from None
    rows = slice_local(list(range(len(dataset))), local_slice, f"{where} {path}")
    return (dataset.select(rows) if len(rows) != len(dataset) else dataset), None


def data_files(path: Path) -> list[Path]:
    """The data files under a folder (recursively), hidden files and folders (.git, .cache) left out."""
    return sorted(
        p for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in LOCAL_SUFFIXES and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )


def split_of(file: Path, root: Path) -> str | None:
    """The split a file belongs to, read from its path under root ('valid'/'dev'/'eval' stay as written)."""
    found = _SPLIT_WORD.findall(str(file.relative_to(root)))
    return found[-1].lower() if found else None


def _describe(path: Path) -> str:
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir() if not p.name.startswith("."))
    shown = ", ".join(entries[:8]) + (f", ... ({len(entries)} entries)" if len(entries) > 8 else "")
    return shown or "nothing"


def load_folder(path: Path, split: str | None, where: str, config: str | None = None):
    """(dataset, row labels or None) of a folder; `config` picks a subfolder (a hub snapshot's configuration)."""
    root = path
    if config:
        if not (path / config).is_dir():
            raise WeMaskError(f"{where} {path} has no subfolder {config!r} for --dataset-config (it holds {_describe(path)})")
        path = path / config
    if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
        return _saved_folder(path, split, where)
    files = data_files(path)
    if not files:
        raise WeMaskError(
            f"{where} {path} is a folder without a dataset (it holds {_describe(path)}): give a {'/'.join(LOCAL_SUFFIXES)} "
            "file, a folder written by datasets' save_to_disk, or a folder of such files (a hub snapshot)"
        )
    name, local_slice = _split_parts(split)
    by_split: dict[str | None, list[Path]] = {}
    for file in files:
        by_split.setdefault(split_of(file, path), []).append(file)
    chosen = by_split.get(name) or (files if set(by_split) == {None} and name == "train" else None)
    if not chosen:
        found = ", ".join(sorted(s for s in by_split if s)) or "none (it is one split, 'train')"
        raise WeMaskError(f"{where} {path} has no files for split {name!r}; the splits its file names give: {found}")
    folders = sorted({str(f.parent.relative_to(path)) for f in chosen})
    if len(folders) > 1:
        raise WeMaskError(
            f"{where} {path}: files for split {name!r} sit in several folders ({', '.join(folders)}): "
            "choose one with --dataset-config FOLDER"
        )
    kinds = {f.suffix.lower() for f in chosen}
    if len(kinds) > 1:
        raise WeMaskError(f"{where} {path}: split {name!r} mixes file types ({', '.join(sorted(kinds))}): keep one type per split")
    return _concatenate(chosen, root, local_slice, where)


def _concatenate(files: list[Path], root: Path, local_slice: str, where: str):
    from datasets import concatenate_datasets
    from pyarrow import ArrowException

    parts, labels = [], []
    for file in files:
        dataset, file_labels = load_file(file, None, where)
        parts.append(dataset)
        prefix = str(file.relative_to(root))
        labels.extend(f"({prefix} {label})" for label in file_labels or [f"row {i + 1}" for i in range(len(dataset))])
    try:
        dataset = parts[0] if len(parts) == 1 else concatenate_datasets(parts)
    except (ValueError, ArrowException) as err:  # "The features can't be aligned", pyarrow's own clashes
        raise WeMaskError(f"{where} {root}: its {len(files)} files do not share one layout ({str(err).strip()[:200]})") from None
    rows = slice_local(list(range(len(dataset))), local_slice, f"{where} {root}")
    if len(rows) != len(dataset):
        dataset, labels = dataset.select(rows), [labels[i] for i in rows]
    return dataset, labels
