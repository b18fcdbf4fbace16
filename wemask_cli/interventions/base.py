"""The intervention seam: a config (data, validated, JSON) that installs itself on a model and owns what it adds.

Torch-free at import: `install()` implementations import torch and `wemask_cli.method` inside.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar

from wemask_cli.interventions.flags import FlagSpec, InterventionConfigError, extras_without_main, off, option_value

Active = Callable[[], bool]
"""A zero-argument predicate asked on every forward; while it returns False an installed intervention acts as
the identity (e.g. DPO's reference pass with `--ref-mask none`, or a PEFT model with its adapter disabled)."""


@dataclass
class Intervention:
    """Base class of intervention configs. Subclasses are dataclasses and set the class variables below.

    kind: the registry key and JSON "kind"; title: its name in a report's legend. has_parameters: whether install() adds trainable parameters
    (saved as safetensors). Flags come from the fields declared with `flags.flag(...)`; a kind with no `main` field
    sets `switch` (the help of a `--<kind>` on/off flag). A kind with neither has no flags. `everywhere`: its flags
    are every command's (infer, eval and the trainers), not the trainers' alone.
    """

    kind: ClassVar[str] = ""
    title: ClassVar[str] = ""  # how a report's legend names it ("GatedNorm"); the kind when empty
    has_parameters: ClassVar[bool] = False
    switch: ClassVar[str] = ""
    everywhere: ClassVar[bool] = False  # its flags are every command's (WeMask's), not the trainers' alone

    @classmethod
    def flag_name(cls, name: str = "") -> str:
        """The flag of field `name` ('' or the main field: the kind's own flag), e.g. rank -> --gated-norm-rank."""
        main = next((f.name for f in fields(cls) if f.metadata.get("main")), None)
        stem = "--" + cls.kind.replace("_", "-")
        return stem if name in ("", main) else f"{stem}-{name.replace('_', '-')}"

    @classmethod
    def flags(cls) -> list[FlagSpec]:
        """The flags this kind declares, main flag first, derived from its fields (torch-free)."""
        hints = typing.get_type_hints(cls)
        specs = [FlagSpec(cls.flag_name(), bool, cls.switch, False)] if cls.switch else []
        for f in fields(cls):
            if "help" not in f.metadata:
                continue
            kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
            default = None if f.metadata["main"] or f.default is MISSING else f.default
            spec = FlagSpec(cls.flag_name(f.name), kind, f.metadata["help"], default, f.metadata["choices"])
            if f.metadata["main"]:
                specs.insert(0, spec)
            else:
                specs.append(spec)
        return specs

    def to_dict(self) -> dict:
        """JSON-ready record with its "kind"."""
        return {"kind": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "Intervention":
        """Rebuild from `to_dict()` output; unknown keys are an InterventionConfigError."""
        data = {k: v for k, v in data.items() if k != "kind"}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InterventionConfigError(f"unknown {cls.kind} keys {unknown}: allowed keys are {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as err:
            raise InterventionConfigError(f"invalid {cls.kind} record: {err}") from None

    @classmethod
    def from_options(cls, options: dict) -> "Intervention | None":
        """The config that parsed options ask for (keys = FlagSpec.dest), or None when its main flag is not given
        (a sub-flag given alone is an error). Values may be strings (recipes); 'none', 'off', ... mean not given."""
        specs = cls.flags()
        if not specs:
            return None
        main, extras = specs[0], specs[1:]
        if off(options.get(main.dest)):
            extras_without_main(options, main.dest, {spec.dest: spec.default for spec in extras})
            return None
        by_flag = {cls.flag_name(f.name): f.name for f in fields(cls) if "help" in f.metadata}
        values = {by_flag[spec.name]: option_value(options.get(spec.dest), spec) for spec in specs if spec.name in by_flag}
        return cls(**{name: value for name, value in values.items() if value is not None})

    def describe(self) -> str:
        """One line for people."""
        return self.kind

    @property
    def active(self) -> bool:
        """Whether installing it changes the model at all (WeMask at r=0 does not)."""
        return True

    def check_fits(self, hidden_size: int) -> None:
        """Refuse settings a model of this hidden size rules out (a rank above it); called once its config is read."""

    def install(self, model, *, active: Active | None = None) -> "Installed":
        """Install on `model` (a transformers causal LM, PEFT-wrapped or not) and return what was installed."""
        raise NotImplementedError


class Installed:
    """What one install() put on a model: `remove()` takes away exactly that (hooks, added modules).

    config: the resolved config (e.g. WeMask with its dims recorded). parameters(): the trainable tensors
    it added ([] for WeMask). state_dict()/load_state_dict(): those tensors by stable local names, for the
    run's interventions.safetensors. Usable as a context manager (removed on exit).
    """

    def __init__(self, config: Intervention, records=(), modules=()):
        self.config = config
        self.records = list(records)  # method.hooks.OwnedHook
        self.modules: dict[str, tuple[Any, str, Any]] = {name: entry for name, entry in modules}

    def add_module(self, name: str, parent, attribute: str, module) -> None:
        """Register `module` as `parent.<attribute>` and remember it under the local `name`."""
        if hasattr(parent, attribute):
            raise InterventionConfigError(
                f"{self.config.kind} is already installed on this model ({attribute} exists): remove it first"
            )
        parent.add_module(attribute, module)
        self.modules[name] = (parent, attribute, module)

    @contextmanager
    def building(self):
        """Guard an install: on any failure, remove what was already added, then re-raise."""
        try:
            yield self
        except BaseException:
            self.remove()
            raise

    def parameters(self) -> list:
        return [p for _, _, module in self.modules.values() for p in module.parameters()]

    def state_dict(self) -> dict:
        """{local name: tensor} of every parameter this install added (detached)."""
        return {
            f"{name}.{key}": value.detach()
            for name, (_, _, module) in self.modules.items()
            for key, value in module.state_dict().items()
        }

    def load_state_dict(self, state: dict) -> None:
        """Load tensors saved by state_dict(); missing or unexpected names are an InterventionConfigError."""
        expected = set(self.state_dict())
        if set(state) != expected:
            missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
            raise InterventionConfigError(
                f"the saved {self.config.kind} weights do not match this model: missing {missing[:4]}, "
                f"unexpected {unexpected[:4]} (was the run saved from another model or with other settings?)"
            )
        for name, (_, _, module) in self.modules.items():
            prefix = f"{name}."
            own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            current = module.state_dict()
            for key, value in own.items():
                if tuple(value.shape) != tuple(current[key].shape):
                    raise InterventionConfigError(
                        f"the saved {self.config.kind} weight {name}.{key} has shape {tuple(value.shape)}, "
                        f"this model needs {tuple(current[key].shape)}"
                    )
            module.load_state_dict(own)

    def remove(self) -> None:
        """Remove the hooks and modules this install added (idempotent)."""
        for record in self.records:
            record.remove()
        self.records = []
        for parent, attribute, module in self.modules.values():
            if getattr(parent, attribute, None) is module:
                delattr(parent, attribute)
        self.modules = {}

    def __enter__(self) -> "Installed":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
