"""Layouts recognised without flags (verl, Alpaca, ShareGPT, unpaired rows, a plugin's): `DataLayout`, and LAYOUTS,
their registry (entry-point group `wemask.data_layouts`).

A layout is a `DataLayout` subclass registered with `@LAYOUTS.register`: its `name`, `recognises(rows)` (on a file's
first rows) and `feeds`: {the kind of data it converts to (`TrainingData.kind`: supervised, preference, prompts,
unpaired, ...): a converter}. A converter is `(dataset, labels, where) -> (dataset, DataFormat)` (one that changes
the number of rows adds their labels, for the row checks' errors), or None when this file needs nothing converted
for that kind. A stage reads what its TrainingData's kind names, so this layer branches on no stage name: a new
stage needs no edit here, and a new layout is one module. The first layout that recognises the file and converts it
wins; explicit `--dataset-columns` are applied before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

from wemask_cli.data.columns import sample_rows
from wemask_cli.data.formats import TrainingData
from wemask_cli.runtime.registry import Registry, RegistryError

SAMPLED_ROWS = 5  # the first rows a layout is recognised by
Converter = Callable[..., tuple | None]


class DataLayout:
    """One layout recognised without flags (see the module docstring)."""

    name: ClassVar[str] = ""
    feeds: ClassVar[Mapping[str, Converter]] = {}

    @staticmethod
    def recognises(rows: list[dict]) -> bool:
        raise NotImplementedError


def check_layout(layout: type[DataLayout]) -> None:
    if not layout.feeds or not all(callable(convert) for convert in layout.feeds.values()):
        raise RegistryError(f"the data layout {layout.name!r} feeds no kind of data: declare feeds = {{kind: converter}}")


LAYOUTS: Registry[type[DataLayout]] = Registry(
    "data layout", "wemask.data_layouts", DataLayout, package=__package__, builtin=("verl", "chat_layouts", "unpaired"),
    check=check_layout,
)


def adapt_layout(data: TrainingData, dataset, labels: list[str] | None, where: str):
    """(dataset, format, row labels) from the first registered layout that recognises `dataset` and converts it for
    `data`'s kind, else None (the stage's own formats are detected then)."""
    if data.kind is None:
        return None
    rows = sample_rows(dataset, SAMPLED_ROWS)
    for layout in LAYOUTS.entries().values():
        convert = layout.feeds.get(data.kind)
        if convert is not None and layout.recognises(rows):
            adapted = convert(dataset, labels, where)
            if adapted is not None:
                return adapted if len(adapted) == 3 else (*adapted, labels)
    return None
