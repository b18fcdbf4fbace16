"""Every TRL value a run is given (a recipe key or a flag) checked against its field's type in the stage's TRL config
dataclass before any folder is claimed or model loads: NaN and infinity refused, integers integers, no text where a
number belongs, and each `report_to` integration known and installed. TRL itself would accept some of these and fail
with a traceback once training starts."""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from functools import cache

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.recipe import KIND_NAMES

ANY = object  # a field type we do not check (ParallelismConfig, Any, ...)


def _kinds(hint) -> frozenset:
    """The plain types a field accepts: bool, int, float, str, list, dict, NoneType, or ANY."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return frozenset().union(*(_kinds(arg) for arg in typing.get_args(hint)))
    if origin is typing.Literal:
        return frozenset(type(arg) for arg in typing.get_args(hint))
    if origin in (list, tuple) or hint in (list, tuple):
        return frozenset({list})
    if origin is dict or hint is dict:
        return frozenset({dict})
    if hint is type(None) or hint in (bool, int, float, str):
        return frozenset({hint})
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return frozenset({str})
    return frozenset({ANY})


def _item_kinds(hint) -> frozenset:
    """The types a list field's items accept (ANY when not stated)."""
    for arg in (typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)):
        if typing.get_origin(arg) in (list, tuple) and typing.get_args(arg):
            return _kinds(typing.get_args(arg)[0])
    return frozenset({ANY})


@cache
def _field_types(config_class) -> dict:
    """Each field's (kinds, item kinds); a flag that may stand alone (argparse `const`, e.g. a bare `--fsdp` for
    fsdp=True, the form transformers >= 5.20 keeps) accepts its const's type too."""
    found = {name: (_kinds(hint), _item_kinds(hint)) for name, hint in typing.get_type_hints(config_class).items()}
    for field in dataclasses.fields(config_class):
        if "const" in field.metadata and field.name in found:
            kinds, items = found[field.name]
            found[field.name] = (kinds | {type(field.metadata["const"])}, items)
    return found


def _mismatch(value, kinds: frozenset) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if ANY in kinds:
        return False
    if value is None:
        return type(None) not in kinds
    if isinstance(value, bool):
        return bool not in kinds
    if isinstance(value, int):
        return not ({int, float} & kinds)
    allowed = {float: float, str: str, list: list, tuple: list, dict: dict}
    return allowed.get(type(value), ANY) not in kinds


def _wanted(kinds: frozenset) -> str:
    names = [KIND_NAMES[kind] for kind in (bool, int, float, str, list, dict) if kind in kinds]
    if float in kinds:
        names = [name for name in names if name != KIND_NAMES[int]]
    names = [name.replace("a number", "a finite number") for name in names]
    return " or ".join(names) + (" (or null)" if type(None) in kinds else "")


def check_trl_value(config_class, key: str, value, where: str) -> None:
    """One line (naming `where`, a flag or a recipe line) when `value` does not fit TRL's field `key`."""
    kinds, items = _field_types(config_class).get(key, (frozenset({ANY}), frozenset({ANY})))
    bad = _mismatch(value, kinds)
    if not bad and isinstance(value, (list, tuple)):
        bad = any(_mismatch(item, items) for item in value)
        kinds = items if bad else kinds
    if bad:
        shown = "null" if value is None else repr(value)
        raise WeMaskError(f"{where}: {key} must be {_wanted(kinds)}, not {shown}")
    if key == "report_to":
        check_report_to(value, where)


def check_report_to(value, where: str) -> None:
    """Every integration `report_to` names is one transformers knows and one installed here ('none', 'all' too)."""
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    names = [value] if isinstance(value, str) else list(value or [])
    available = set(get_available_reporting_integrations())
    for name in names:
        if name in ("none", "all") or name in available:
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise WeMaskError(f"{where}: report_to {name!r} is not an integration transformers knows: use none, all or "
                              f"one of {', '.join(sorted(INTEGRATION_TO_CALLBACK))}")
        raise WeMaskError(f"{where}: report_to {name!r} is not installed here: install its package, or use none")
