"""Trainer stages as torch-free declarations, and the registry the CLI builds its training commands from.

A stage is one module: a `StageSpec` (name, help, the data it reads, its own flags, its reference-model policy,
and the dotted path of its `stage.Stage` subclass, imported only when the command runs) and that subclass. Found
here: the built-in modules in BUILTIN, and every entry point of the group `wemask.stages` naming a StageSpec
(pyproject: `[project.entry-points."wemask.stages"] kto = "my_pkg.kto:STAGE"`). `wemask --help` reads only the specs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..data.formats import TrainingData
from ..plugins import left_out, load_plugins

PLUGIN_GROUP = "wemask.stages"
BUILTIN = ("sft", "dpo", "grpo")  # modules of this package, each with a STAGE spec, in `wemask --help` order
REFERENCES = ("none", "same", "choose")  # no reference model | one masked like the policy | --ref-mask same|none


@dataclass(frozen=True)
class StageFlag:
    """One of a stage's own options: a flag, a recipe key, and `opts[dest]` in the run."""

    dest: str
    type: type  # str, int, float, bool (--x/--no-x) or list (repeatable, values are strings)
    help: str
    default: Any = None  # below recipe and flags
    recipe_kinds: Any = None  # the type(s) a recipe value may have (default: `type`)

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    @property
    def kinds(self):
        return self.recipe_kinds or self.type


REF_MASK_FLAG = StageFlag(
    "ref_mask", str,
    "same (default in aware mode): the reference model computes with the policy's mask, so step-0 rewards are 0 | "
    "none: unmasked reference. free mode is plain preference tuning (both unmasked).",
)


@dataclass(frozen=True)
class StageSpec:
    """What the CLI, the recipe resolution and the data loader read about a stage, without importing it."""

    name: str  # the command: `wemask NAME`
    help: str  # the command's help (first line: the summary in `wemask --help`)
    stage_class: str  # "package.module:Class", a stage.Stage subclass
    trl_config: str  # TRL's config class whose fields pass through as flags ("SFTConfig", ...)
    data: TrainingData  # the formats it accepts (first match wins) and how known layouts convert for it
    flags: tuple[StageFlag, ...] = ()
    reference: str = "none"  # one of REFERENCES; "choose" adds --ref-mask (see train/reference.py)

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"stage {self.name}: reference {self.reference!r} is not one of {REFERENCES}")

    def all_flags(self) -> tuple[StageFlag, ...]:
        return self.flags + ((REF_MASK_FLAG,) if self.reference == "choose" else ())

    def load(self):
        """The Stage subclass (imports its module)."""
        module, _, attr = self.stage_class.partition(":")
        return getattr(importlib.import_module(module), attr)


def _plugin_specs() -> dict[str, StageSpec]:
    """The specs named by the entry points of `wemask.stages` (loaded once per process); anything else is left out."""
    specs = {}
    for name, spec in load_plugins(PLUGIN_GROUP, "trainer stage"):
        if isinstance(spec, StageSpec):
            specs[spec.name] = spec
        else:
            left_out("trainer stage", name, PLUGIN_GROUP, "is not a StageSpec")
    return specs


def builtin_specs() -> dict[str, StageSpec]:
    return {name: importlib.import_module(f".{name}", __package__).STAGE for name in BUILTIN}


def stage_specs() -> dict[str, StageSpec]:
    """Every stage by name: the built-in ones, then the plugins' (a plugin cannot replace a built-in)."""
    found = builtin_specs()
    for name, spec in _plugin_specs().items():
        if name in found:
            left_out("trainer stage", spec.stage_class, PLUGIN_GROUP, f"takes the name {name!r} of a built-in stage")
        else:
            found[name] = spec
    return found
