"""Installed library versions, for the records runs write (wemask_run.json, eval provenance). Torch-free."""

from __future__ import annotations

import importlib.metadata


def library_versions(names) -> dict[str, str | None]:
    """{distribution name: installed version, or None when it is not installed}, in the order given."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found
