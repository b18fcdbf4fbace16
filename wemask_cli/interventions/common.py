"""Helpers the remedies share: which layers and norms, option checks. Torch-free."""

from __future__ import annotations

from ..method.config import parse_layer_span, span_layers
from .base import InterventionConfigError

NORM_SITES = ("attn", "ffn", "both")


def check_layers(layers: str, kind: str) -> tuple[int, int | None] | None:
    """`layers` is 'all' (None) or a range 'a:b', 'a:' or ':b' (WeMask's grammar: method.config.parse_layer_span)."""
    return parse_layer_span(layers, ("all",), f"{kind} layers", InterventionConfigError)


def layer_indices(layers: str, num_layers: int, kind: str) -> list[int]:
    """The 0-based layers `layers` names in a model of `num_layers`, checked against its depth."""
    span = check_layers(layers, kind)
    if span is None:
        return list(range(num_layers))
    return span_layers(span, num_layers, layers, f"{kind} layers", InterventionConfigError)


def check_sites(norms: str, kind: str) -> tuple[str, ...]:
    """('attn',), ('ffn',) or ('attn', 'ffn') for 'attn' | 'ffn' | 'both'."""
    if norms not in NORM_SITES:
        raise InterventionConfigError(f"{kind} norms={norms!r} is unknown: use one of {', '.join(NORM_SITES)}")
    return ("attn", "ffn") if norms == "both" else (norms,)


def check_rank(rank, kind: str) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InterventionConfigError(f"{kind} rank={rank!r} is not valid: use a whole number >= 1")


def check_rank_fits(rank: int, hidden_size: int, kind: str, flag: str) -> None:
    """A low-rank gate's rank is at most the model's hidden size (a larger one adds parameters, not rank)."""
    if rank > hidden_size:
        raise InterventionConfigError(
            f"{kind} rank {rank} ({flag}) is larger than the model's hidden size {hidden_size}: use at most {hidden_size}"
        )


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


def norm_sites(model, layers: str, norms: str, kind: str):
    """(layer index, layer parts, 'attn' | 'ffn', that norm module) for every norm a remedy acts on."""
    from ..method.arch import resolve_layers

    parts = resolve_layers(model)
    for l in layer_indices(layers, len(parts), kind):
        for site in check_sites(norms, kind):
            yield l, parts[l], site, parts[l].attn_norm if site == "attn" else parts[l].ffn_norm
