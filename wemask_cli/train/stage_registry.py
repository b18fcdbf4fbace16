"""Trainer stages as torch-free declarations, and STAGES, the registry the CLI builds its training commands from.

A stage is one module: a `StageSpec` (name, help, the data it reads, its own flags, its reference-model policy,
and the dotted path of its `stage_base.Stage` subclass, imported only when the command runs), registered with
`STAGES.register`, and that subclass. Found here: the built-in modules in BUILTIN, and every entry point of the group
`wemask.stages` naming a StageSpec (pyproject: `[project.entry-points."wemask.stages"] orpo = "my_pkg.orpo:STAGE"`),
named like the stage. `wemask --help` reads only the built-in specs and the plugins' entry-point names.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from wemask_cli.data.formats import TrainingData
from wemask_cli.runtime.plugins import declared, left_out
from wemask_cli.runtime.registry import Registry, RegistryError

PLUGIN_GROUP = "wemask.stages"
BUILTIN = ("sft", "dpo", "grpo", "kto", "rloo")  # modules of this package, each with a STAGE spec, in `wemask --help` order
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
    stage_class: str  # "package.module:Class", a stage_base.Stage subclass
    trl_config: str  # "module:Class", TRL's config class whose fields pass through as flags ("trl:SFTConfig", ...)
    data: TrainingData  # the kind of data it reads (data/formats.py), named after the stage here
    flags: tuple[StageFlag, ...] = ()
    reference: str = "none"  # one of REFERENCES; "choose" adds --ref-mask (see train/reference.py)

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"stage {self.name}: reference {self.reference!r} is not one of {REFERENCES}")
        object.__setattr__(self, "data", self.data.named(self.name))  # the kind it declares, read by this stage

    def all_flags(self) -> tuple[StageFlag, ...]:
        return self.flags + ((REF_MASK_FLAG,) if self.reference == "choose" else ())

    def load(self):
        """The Stage subclass (imports its module)."""
        return resolve(self.stage_class)

    def config_class(self) -> type:
        """TRL's config class (imports its module)."""
        return resolve(self.trl_config)


def resolve(path: str):
    """What a 'package.module:Name' path names (imports the module): the one lookup of a stage's classes."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def declaration_problem(spec: StageSpec) -> str | None:
    """Why a stage's declaration cannot be a command (a flag the CLI cannot parse), or None."""
    if ":" not in spec.trl_config:
        return f"names its TRL config {spec.trl_config!r}: name it as 'module:Class' ('trl:SFTConfig')"
    unparsable = [f"{f.flag} of type {getattr(f.type, '__name__', f.type)}" for f in spec.all_flags() if f.type not in FLAG_TYPES]
    if unparsable:
        return f"declares the flag {', '.join(unparsable)}: a stage's flag is str, int, float, bool or list"
    return None


def check_declaration(spec: StageSpec) -> None:
    if (problem := declaration_problem(spec)) is not None:
        raise RegistryError(f"stage {spec.name}: {problem}")


def vet_plugin(point_name: str, spec) -> str | None:
    """Why a `wemask.stages` entry point is left out (one warning), '' when its name was refused from the metadata
    already (plugin_stage_names), or None: it is a StageSpec with parsable flags, a name of its own and named like its
    entry point (the command `wemask --help` lists from the metadata alone)."""
    if point_name not in plugin_stage_names():
        return ""
    if not isinstance(spec, StageSpec):
        return "is not a StageSpec"
    if (problem := declaration_problem(spec)) is not None:
        return problem
    if spec.name in BUILTIN:
        return f"takes the name {spec.name!r} of a built-in stage (wemask_cli.train.{spec.name})"
    if spec.name != point_name:
        return f"declares the stage {spec.name!r} under the entry-point name {point_name!r}: name them alike"
    return None


STAGES: Registry[StageSpec] = Registry(
    "trainer stage", PLUGIN_GROUP, StageSpec, package=__package__, builtin=BUILTIN, check=check_declaration,
    vet=vet_plugin, module_of=lambda spec: spec.stage_class.partition(":")[0],
)


def builtin_specs() -> dict[str, StageSpec]:
    return STAGES.builtins()


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
    found = STAGES.builtins()
    return found if name in found else STAGES.entries()
