"""Helpers the remedies share: which layers and norms, option checks. Torch-free."""

from __future__ import annotations

from .base import InterventionConfigError

NORM_SITES = ("attn", "ffn", "both")


def check_layers(layers: str, kind: str) -> None:
    """`layers` is 'all', 'a:b' (0-based, b exclusive) or 'a:' (layer a to the last)."""
    if layers == "all":
        return
    start, sep, stop = str(layers).partition(":")
    try:
        if not sep:
            raise ValueError
        first, last = int(start), (int(stop) if stop else None)
    except ValueError:
        raise InterventionConfigError(
            f"{kind} layers={layers!r} is not valid: use 'all', a 0-based range 'a:b' (b exclusive) or 'a:' (to the end)"
        ) from None
    if first < 0 or (last is not None and last <= first):
        raise InterventionConfigError(f"{kind} layers={layers!r} is an empty or negative range: use 0 <= a < b")


def layer_indices(layers: str, num_layers: int, kind: str) -> list[int]:
    """The 0-based layers `layers` names in a model of `num_layers`, checked against its depth."""
    check_layers(layers, kind)
    if layers == "all":
        return list(range(num_layers))
    start, _, stop = layers.partition(":")
    first, last = int(start), (int(stop) if stop else num_layers)
    if last > num_layers:
        raise InterventionConfigError(
            f"{kind} layers={layers!r} is outside the model: it has {num_layers} layers (0..{num_layers - 1})"
        )
    return list(range(first, last))


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


def as_int(value, flag: str, default: int) -> int:
    """An integer option (recipes and CLIs may hand over strings); `default` when not given."""
    if off(value):
        return default
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise InterventionConfigError(f"{flag} {value!r} is not a whole number") from None


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
