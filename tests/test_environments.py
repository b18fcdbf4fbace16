"""The two environments `make test` runs (issue: wemask outside the one environment it was tested in): the supported
ranges in pyproject.toml are what they test, and `wemask env` says which one it is in."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import tomllib
from conftest import run_main
from packaging.version import Version

from wemask_cli.resources import tested_environments as recorded_environments
from wemask_cli.runtime.versions import TESTED_LIBRARIES, library_versions, which_environment

ROOT = Path(__file__).resolve().parent.parent
CORE = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes")


def requirements() -> dict[str, str]:
    """{distribution: its specifier} of pyproject's dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for line in project["dependencies"]:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", line).groups()
        found[name.lower()] = spec
    return found


def test_lower_bounds_are_the_oldest_tested_release_and_no_upper_bound_is_set():
    environments = recorded_environments()
    specs = requirements()
    for library in CORE:
        tested = [Version(env["versions"][library].split("+")[0]) for env in environments.values()]
        oldest = min(tested)
        assert specs[library] == f">={oldest.major}.{oldest.minor}", (library, specs[library], oldest)
        assert "<" not in specs[library]


def test_both_environments_are_recorded_and_differ_only_as_vllm_pins():
    environments = recorded_environments()
    assert set(environments) == {"current", "vllm"}
    assert environments["current"]["versions"]["vllm"] is None and environments["vllm"]["versions"]["vllm"]
    for env in environments.values():
        assert set(env["versions"]) == set(TESTED_LIBRARIES)


def test_which_environment_names_the_untested_versions():
    environments = recorded_environments()
    current = dict(environments["current"]["versions"])
    assert which_environment(current, environments) == ("current", {})
    newer = {**current, "transformers": "99.0.0"}
    oldest, newest = sorted((env["versions"]["transformers"] for env in environments.values()), key=Version)
    tested = ".".join(oldest.split(".")[:2]) + ("" if oldest == newest else " to " + ".".join(newest.split(".")[:2]))
    requirement = f"transformers>={'.'.join(oldest.split('.')[:2])},<{Version(newest).major}.{Version(newest).minor + 1}"
    assert which_environment(newer, environments) == ("current", {"transformers": ("99.0.0", tested, requirement)})
    assert which_environment(dict(environments["vllm"]["versions"]), environments) == ("vllm", {})


def test_this_environment_is_a_recorded_one(monkeypatch, capsys):
    """`wemask env` names the environment; an installed release older than the recorded one is a broken install,
    a newer one (the registries moved on) is a warning to re-run `make environments`."""
    code, out, _ = run_main(monkeypatch, capsys, "env")
    installed = library_versions(TESTED_LIBRARIES)
    name, differ = which_environment(installed, recorded_environments())
    assert code == 0 and f"environment   {name}" in out
    assert name == ("vllm" if installed["vllm"] else "current")
    older = {lib: facts for lib, facts in differ.items() if Version(facts[0]) < Version(facts[1].split(" to ")[0])}
    assert not older, f"{name} environment has older or missing libraries than recorded: {older}"
    if differ:
        assert "untested versions" in out
        warnings.warn(f"the registries now serve {differ}: run `make environments` and commit the record", stacklevel=1)
