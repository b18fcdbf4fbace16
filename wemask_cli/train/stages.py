"""Trainer stages as torch-free declarations, and the registry the CLI builds its training commands from.

A stage is one module: a `StageSpec` (name, help, the data it reads, its own flags, its reference-model policy,
and the dotted path of its `stage.Stage` subclass, imported only when the command runs) and that subclass. Found
here: the built-in modules in BUILTIN, and every entry point of the group `wemask.stages` naming a StageSpec
(pyproject: `[project.entry-points."wemask.stages"] kto = "my_pkg.kto:STAGE"`). `wemask --help` reads only the specs.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from ..data.formats import TrainingData
from ..plugins import declared, left_out, load_plugins

PLUGIN_GROUP = "wemask.stages"
BUILTIN = ("sft", "dpo", "grpo")  # modules of this package, each with a STAGE spec, in `wemask --help` order
FLAG_TYPES = (str, int, float, bool, list)  # what StageFlag.type may be (cli/train.py's stage_option)
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


def plugin_spec(plugin) -> StageSpec | None:
    """The StageSpec a `wemask.stages` entry point names, or None (one warning) when it is not one, takes a built-in's
    name, or is not named like its entry point (the command `wemask --help` lists from the metadata alone)."""
    spec = plugin.value
    if not isinstance(spec, StageSpec):
        why = "is not a StageSpec"
    elif unparsable := [f"{f.flag} of type {getattr(f.type, '__name__', f.type)}" for f in spec.all_flags()
                        if f.type not in FLAG_TYPES]:
        why = f"declares the flag {', '.join(unparsable)}: a stage's flag is str, int, float, bool or list"
    elif spec.name in BUILTIN:
        why = f"takes the name {spec.name!r} of a built-in stage (wemask_cli.train.{spec.name})"
    elif spec.name != plugin.name:
        why = f"declares the stage {spec.name!r} under the entry-point name {plugin.name!r}: name them alike"
    else:
        return spec
    left_out("trainer stage", plugin.source, PLUGIN_GROUP, why)
    return None


def builtin_specs() -> dict[str, StageSpec]:
    return {name: importlib.import_module(f".{name}", __package__).STAGE for name in BUILTIN}


@functools.cache
def plugin_stage_names() -> dict[str, str]:
    """{command name: source} of the stages plugins declare, from the installed metadata only (nothing imported);
    an entry point named like a built-in stage is one warning (once per process) and is left out."""
    found = {}
    for name, source in declared(PLUGIN_GROUP).items():
        if name in BUILTIN:
            left_out("trainer stage", source, PLUGIN_GROUP, f"takes the name {name!r} of the built-in stage wemask_cli.train.{name}")
        else:
            found[name] = source
    return found


def stage_specs(name: str | None = None) -> dict[str, StageSpec]:
    """Every stage by name: the built-in ones, then the plugins' (a plugin cannot replace a built-in); with `name`
    a built-in, the plugins are not loaded."""
    found = builtin_specs()
    if name in found:
        return found
    for plugin in load_plugins(PLUGIN_GROUP, "trainer stage"):
        if plugin.name in plugin_stage_names() and (spec := plugin_spec(plugin)) is not None:  # else warned already
            found[spec.name] = spec
    return found
