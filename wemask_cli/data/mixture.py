"""TRL's dataset mixture, the `datasets:` recipe key (trl.scripts.utils DatasetMixtureConfig / get_dataset):

    datasets:                       # each one read as --dataset is (local file or folder, or a hub name)
      - path: data/sft_chat.jsonl
        split: train                # default train; 'train[:100]' slices
        columns: [messages]         # optional: the columns to keep
        fraction: 0.7               # optional, for all or none: target shares, no dataset oversampled
      - path: data/math_sft.jsonl
    test_split_size: 0.1            # optional: held out for evaluation (datasets' train_test_split)

Each part's layout is adapted and checked as a --dataset is; all parts must end in one format (TRL concatenates).
"""

from __future__ import annotations

from wemask_cli.data.formats import TrainingData
from wemask_cli.runtime.errors import WeMaskError

ENTRY_KEYS = ("path", "name", "split", "columns", "fraction")
UNSUPPORTED = ("data_dir", "data_files")  # TRL's load_dataset arguments: give the file or folder as `path`


def check_entry(entry, number: int) -> dict:
    """One `datasets:` entry, its keys checked (one line each)."""
    where = f"datasets entry {number}"
    if not isinstance(entry, dict) or not entry.get("path"):
        raise WeMaskError(f"{where} needs a 'path' (a local file or folder, or a hub dataset name): got {entry!r}")
    unsupported = sorted(set(entry) & set(UNSUPPORTED))
    if unsupported:
        raise WeMaskError(f"{where}: {unsupported} are not read by wemask: give the file or folder itself as 'path'")
    unknown = sorted(set(entry) - set(ENTRY_KEYS) - set(UNSUPPORTED))
    if unknown:
        raise WeMaskError(f"{where}: unknown key(s) {unknown}: a mixture entry has {', '.join(ENTRY_KEYS)}")
    columns = entry.get("columns")
    if columns is not None and not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)):
        raise WeMaskError(f"{where}: 'columns' must be a list of column names, got {columns!r}")
    return entry


def mixture_shares(sizes: list[int], fractions: list) -> list[int]:
    """Rows kept per part: all of them, or TRL's rule for fractions (normalised shares of the largest mixture that
    oversamples no part: the first round(share * total) rows)."""
    if all(f is None for f in fractions):
        return sizes
    if any(f is None for f in fractions) or any(not isinstance(f, (int, float)) or f < 0 for f in fractions) or not sum(fractions):
        raise WeMaskError("datasets: 'fraction' must be a number >= 0 in every entry or in none of them (not all 0)")
    weights = [f / sum(fractions) for f in fractions]
    total = min(size / weight for size, weight in zip(sizes, weights) if weight > 0)
    return [round(weight * total) for weight in weights]


def load_mixture(data: TrainingData, entries, columns=None, test_split_size=None, seed: int = 0):
    """(train dataset, eval dataset or None, format) of a `datasets:` mixture (see the module docstring)."""
    from datasets import concatenate_datasets

    from wemask_cli.data.training import open_dataset, prepare_training_data

    if not isinstance(entries, list) or not entries:
        raise WeMaskError("datasets: give a list of entries, each with a 'path' (TRL's dataset mixture)")
    parts, formats = [], []
    for number, entry in enumerate(entries, 1):
        entry = check_entry(entry, number)
        dataset, labels, where = open_dataset(entry["path"], split=entry.get("split", "train"), config=entry.get("name"),
                                              what=f"datasets entry {number}")  # fmt: skip
        if entry.get("columns"):
            dataset = dataset.select_columns(entry["columns"])
        dataset, fmt = prepare_training_data(data, dataset, labels, where, columns)
        parts.append(dataset)
        formats.append(fmt)
    if len({fmt.columns for fmt in formats}) > 1:
        raise WeMaskError(f"datasets: the entries are in different formats ({', '.join(f.name for f in formats)}): TRL concatenates "
                          "them, so give entries of one format (rename columns with 'columns' or --dataset-columns)")  # fmt: skip
    kept = mixture_shares([len(part) for part in parts], [entry.get("fraction") for entry in entries])
    mixed = concatenate_datasets([part.select(range(rows)) for part, rows in zip(parts, kept)])
    if test_split_size is None:
        return mixed, None, formats[0]
    split = mixed.train_test_split(test_size=test_split_size, seed=seed)
    return split["train"], split["test"], formats[0]
