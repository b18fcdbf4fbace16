"""Helpers the remedies share: which layers and norms, option checks. Torch-free."""

from __future__ import annotations

from wemask_cli.interventions.base import InterventionConfigError
from wemask_cli.method.config import parse_layer_span, span_layers

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


def norm_sites(model, layers: str, norms: str, kind: str):
    """(layer index, layer parts, 'attn' | 'ffn', that norm module) for every norm a remedy acts on.

    A layer without that norm (post-norm OLMo-2) refuses, naming it; in a parallel layout (Cohere 2) the
    attention's and the FFN's norm are one module, acted on once.
    """
    from wemask_cli.method.arch import resolve_layers

    parts = resolve_layers(model)
    for l in layer_indices(layers, len(parts), kind):
        seen = []
        for site in check_sites(norms, kind):
            norm = parts[l].need(f"{site}_norm", f"{kind} on the {site} norm")
            if not any(norm is other for other in seen):
                seen.append(norm)
                yield l, parts[l], site, norm
