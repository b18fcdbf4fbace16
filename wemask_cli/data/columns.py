"""Column names and dotted paths into nested records (`reward_model.ground_truth`, `extra_info.question`).

A path is read part by part: at each level the longest run of parts that is a key wins (so a top-level column
named 'a.b' is still found), and a number indexes a list (`prompt.0.content`). Used by --dataset-columns and by
eval's --question-field/--choices-field/--answer-field/--text-field.
"""

from __future__ import annotations

from wemask_cli.runtime.errors import WeMaskError

_MISSING = object()
_SHOWN = 40


def _walk(value, parts: list[str]):
    """(value, parts used) following parts as far as they go; value is _MISSING when the path stops short."""
    used = 0
    while used < len(parts):
        if isinstance(value, dict):
            for end in range(len(parts), used, -1):
                key = ".".join(parts[used:end])
                if key in value:
                    value, used = value[key], end
                    break
            else:
                return _MISSING, used
        elif isinstance(value, list) and parts[used].isdigit() and int(parts[used]) < len(value):
            value, used = value[int(parts[used])], used + 1
        else:
            return _MISSING, used
    return value, used


def column_value(row: dict, path: str, default=None):
    """The value at a column name or dotted path in one row (`default` when this row lacks it)."""
    value, _ = _walk(row, path.split("."))
    return default if value is _MISSING else value


def has_column(rows: list[dict], path: str) -> bool:
    """True when some row holds the path (a None value counts: the column exists, that row is empty)."""
    return any(_walk(row, path.split("."))[0] is not _MISSING for row in rows)


def nested_columns(rows: list[dict], limit: int = 50) -> list[str]:
    """Every column and dotted path into nested records in the first `limit` rows, in order of appearance."""
    paths: dict[str, None] = {}

    def visit(value, prefix: str) -> None:
        for key, inner in value.items():
            path = f"{prefix}{key}"
            paths[path] = None
            if isinstance(inner, dict):
                visit(inner, path + ".")

    for row in rows[:limit]:
        visit(row, "")
    return list(paths)


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:_SHOWN]) + (f", ... ({len(paths)} in all)" if len(paths) > _SHOWN else "")


def missing_column_message(rows: list[dict], path: str, where: str) -> str:
    """"{where} does not have 'a.b.c': 'a.b' holds x, y" (or the columns that exist), for an error line."""
    parts = path.split(".")
    best, used = None, 0
    for row in rows[:50]:
        value, depth = _walk(row, parts)
        if depth > used or best is None:
            best, used = row, depth
    if used:
        inner, _ = _walk(best, parts[:used])
        prefix = ".".join(parts[:used])
        if isinstance(inner, dict):
            return f"{where} does not have {path!r}: {prefix!r} holds {_shown(list(inner))}"
        return f"{where} does not have {path!r}: {prefix!r} is a value ({type(inner).__name__}), not a record with named fields"
    return f"{where} does not have a column {path!r} (its columns: {_shown(nested_columns(rows))})"


def check_column(rows: list[dict], path: str, flag: str, where: str) -> str:
    """The path, if some row holds it; else one error line naming the flag and the nested keys that do exist."""
    if not has_column(rows, path):
        raise WeMaskError(f"{flag} {path!r}: {missing_column_message(rows, path, where)}")
    return path


def parse_column_map(text: str | dict | None) -> dict[str, str]:
    """'prompt=question,answer=reward_model.ground_truth' (ours=theirs) -> {theirs: ours}."""
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


def sample_rows(dataset, count: int = 50) -> list[dict]:
    """The first rows of a datasets.Dataset as dicts (for path checks and messages)."""
    return dataset.select(range(min(count, len(dataset)))).to_list()


def check_mapped_columns(rows: list[dict], mapping: dict[str, str], where: str, names=()) -> None:
    """Every column --dataset-columns reads (`mapping`: theirs -> ours) is among `names` or held by some row."""
    for theirs, ours in mapping.items():
        if theirs not in names and not has_column(rows, theirs):
            raise WeMaskError(f"--dataset-columns {ours}={theirs}: {missing_column_message(rows, theirs, where)}")


def apply_column_map(dataset, mapping: dict[str, str], where: str):
    """Rename columns (theirs -> ours); a dotted path becomes a new top-level column; a clash replaces ours."""
    if not mapping:
        return dataset
    check_mapped_columns(sample_rows(dataset), mapping, where, dataset.column_names)
    renames = {theirs: ours for theirs, ours in mapping.items() if theirs in dataset.column_names}
    paths = {theirs: ours for theirs, ours in mapping.items() if theirs not in renames}
    extracted = {ours: path_values(dataset, theirs) for theirs, ours in paths.items()}
    replaced = (set(renames.values()) | set(extracted)) & (set(dataset.column_names) - set(renames))
    if replaced:
        dataset = dataset.remove_columns(sorted(replaced))
    if renames:
        dataset = dataset.rename_columns(renames)
    for ours, values in extracted.items():
        dataset = dataset.add_column(ours, values)
    return dataset


def path_values(dataset, path: str) -> list:
    """The values at a dotted path for every row of a dataset (None where a row lacks it)."""
    parts = path.split(".")
    top = next(".".join(parts[:end]) for end in range(len(parts), 0, -1) if ".".join(parts[:end]) in dataset.column_names)
    rest = path[len(top) + 1:]
    column = dataset[top]
    if not rest:
        return list(column)
    values = (_walk(value, rest.split("."))[0] for value in column)
    return [None if value is _MISSING else value for value in values]
