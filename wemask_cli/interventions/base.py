"""The intervention seam: a config (data, validated, JSON) that installs itself on a model and owns what it adds.

Torch-free at import: `install()` implementations import torch and `wemask_cli.method` inside.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from ..errors import WeMaskError

Active = Callable[[], bool]
"""A zero-argument predicate asked on every forward; while it returns False an installed intervention acts as
the identity (e.g. DPO's reference pass with `--ref-mask none`, or a PEFT model with its adapter disabled)."""


class InterventionConfigError(WeMaskError, ValueError):
    """An invalid intervention setting or saved record; one line on the CLI, a ValueError for API users."""


@dataclass(frozen=True)
class FlagSpec:
    """A command-line flag an intervention declares, torch-free, so any CLI or trainer can expose it generically.

    `dest` is the options-dict key `from_options` reads (the flag without dashes, '-' -> '_'). `type` is
    str, int, float or bool (bool: a switch without a value). `choices`: allowed values for str flags.
    """

    name: str
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


@dataclass
class Intervention:
    """Base class of intervention configs. Subclasses are dataclasses and set the class variables below.

    kind: the registry key and JSON "kind". has_parameters: whether install() adds trainable parameters
    (saved as safetensors). FLAGS: the flags `from_options` reads.
    """

    kind: ClassVar[str] = ""
    has_parameters: ClassVar[bool] = False
    FLAGS: ClassVar[tuple[FlagSpec, ...]] = ()

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
        """The config that parsed options ask for (keys = FlagSpec.dest), or None when its flag is not given."""
        return None

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
