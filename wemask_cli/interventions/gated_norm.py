"""GatedNorm (kind "gated_norm"): after the chosen RMSNorms, y' = g(y) ⊙ y, g(y) = 2·σ(W_up · swish(W_down · y))."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Active, FlagSpec, Installed, Intervention
from .common import as_int, check_layers, check_rank, check_rank_fits, check_sites, extras_without_main, norm_sites, off
from .registry import register


@register
@dataclass
class GatedNorm(Intervention):
    """A low-rank self-gate after the pre-attention ('attn'), pre-FFN ('ffn') or both norms of the chosen layers.

    W_up starts at zero, so g = 1 and the model is unchanged at step 0 (the paper's σ(·) alone would halve it).
    `seed` seeds W_down's initialisation (per layer and site), leaving the global RNG alone.
    """

    norms: str = "both"
    rank: int = 16
    layers: str = "all"
    seed: int = 0

    kind = "gated_norm"
    has_parameters = True
    FLAGS = (
        FlagSpec("--gated-norm", str, "GatedNorm after the pre-attention, pre-FFN or both RMSNorms", None, ("attn", "ffn", "both")),
        FlagSpec("--gated-norm-rank", int, "rank r of GatedNorm's W_down (d->r) and W_up (r->d)", 16),
        FlagSpec("--gated-norm-layers", str, "0-based layers for GatedNorm: all, a:b (b exclusive) or a: (to the end)", "all"),
    )

    def __post_init__(self) -> None:
        check_sites(self.norms, self.kind)
        check_rank(self.rank, self.kind)
        check_layers(self.layers, self.kind)

    def check_fits(self, hidden_size: int) -> None:
        check_rank_fits(self.rank, hidden_size, self.kind, "--gated-norm-rank")

    @classmethod
    def from_options(cls, options: dict) -> "GatedNorm | None":
        if off(options.get("gated_norm")):
            extras_without_main(options, "gated_norm", {"gated_norm_rank": 16, "gated_norm_layers": "all"})
            return None
        return cls(
            norms=options["gated_norm"],
            rank=as_int(options.get("gated_norm_rank"), "--gated-norm-rank", 16),
            layers=options.get("gated_norm_layers") or "all",
        )

    def describe(self) -> str:
        return f"GatedNorm on the {self.norms} norm(s), rank {self.rank}, layers {self.layers} (0-based)"

    def install(self, model, *, active: Active | None = None) -> Installed:
        """Add one LowRankGate per (layer, norm) under the decoder layer and a forward hook on that norm."""
        from ..method.hooks import register_hook
        from ..method.remedies import LowRankGate, NormOutputGate

        installed = Installed(self)
        with installed.building():
            for l, parts, site, norm in norm_sites(model, self.layers, self.norms, self.kind):
                weight = norm.weight
                d = weight.shape[-1]
                self.check_fits(d)
                seed = self.seed * 1_000_003 + 2 * l + (site == "ffn")
                gate = LowRankGate(d, d, self.rank, swish=True, seed=seed, device=weight.device, dtype=weight.dtype)
                installed.add_module(f"{l}.{site}", parts.layer, f"wemask_gated_norm_{site}", gate)
                installed.records.append(register_hook(norm, self.kind, l, NormOutputGate(gate, active), pre=False))
        return installed
