"""How an intervention's config fields become command-line flags, and how option values are read back. Torch-free.

A field declared with `flag(default, help)` is a flag and a recipe key; `Intervention.flags()` (base.py) lists them
as FlagSpecs, which the training commands turn into typer options and `from_options` reads back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wemask_cli.runtime.errors import WeMaskError


class InterventionConfigError(WeMaskError, ValueError):
    """An invalid intervention setting or saved record; one line on the CLI, a ValueError for API users."""


@dataclass(frozen=True)
class FlagSpec:
    """A command-line flag an intervention declares, torch-free, so any CLI or trainer can expose it generically.

    `dest` is the options-dict key `from_options` reads (the flag without dashes, '-' -> '_'). `type` is
    str, int, float or bool (bool: a switch without a value). `choices`: allowed values for str flags. `short`: its
    one-letter names ('-r').
    """

    name: str
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    short: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def flag(default: Any, help: str, *, choices: tuple[str, ...] | None = None, main: bool = False) -> Any:
    """A config field that is also a command-line flag (PEFT's `field(metadata={"help": ...})` style).

    The flag is `--<kind>-<field>` (`--gated-norm-rank`), or `--<kind>` for the one `main` field, whose value turns
    the intervention on (`--gated-norm both`). The field's default is the flag's default, shown in the help."""
    return field(default=default, metadata={"help": help, "choices": tuple(choices) if choices else None, "main": main})


def off(value) -> bool:
    """Whether an option value means "not given" (None, False, or a string like 'none', 'off', 'false')."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "none", "off", "false", "no", "0")
    return value is None or value is False


def as_number(value, flag: str, kind: type):
    """A whole (`kind` int) or real (float) option value; recipes and CLIs may hand over strings."""
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise InterventionConfigError(f"{flag} {value!r} is not {'a whole number' if kind is int else 'a number'}") from None


def option_value(value, spec):
    """An option value as its flag's type (`spec`: a FlagSpec); None when not given (the field's default applies)."""
    if value is None:
        return None
    if spec.type is bool:
        return not off(value)
    if off(value):
        return None
    if spec.type in (int, float):
        return as_number(value, spec.name, spec.type)
    return str(value)


def extras_without_main(options: dict, main: str, extras: dict) -> None:
    """Refuse sub-flags (given with a non-default value) when the main flag is absent: --gated-norm-rank alone."""
    given = [name for name, default in extras.items() if not off(options.get(name)) and str(options.get(name)) != str(default)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise InterventionConfigError(f"{flags} needs --{main.replace('_', '-')}")
