"""GatedNorm (kind "gated_norm"): after the chosen RMSNorms, y' = g(y) ⊙ y, g(y) = 2·σ(W_up · swish(W_down · y))."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions.base import Active, Installed, Intervention
from wemask_cli.interventions.common import NORM_SITES, check_layers, check_rank, check_rank_fits, check_sites, norm_sites
from wemask_cli.interventions.flags import flag
from wemask_cli.interventions.registry import register


@register
@dataclass
class GatedNorm(Intervention):
    """A low-rank self-gate after the pre-attention ('attn'), pre-FFN ('ffn') or both norms of the chosen layers.

    W_up starts at zero, so g = 1 and the model is unchanged at step 0 (the paper's σ(·) alone would halve it).
    `seed` seeds W_down's initialisation (per layer and site), leaving the global RNG alone.
    """

    norms: str = flag("both", "GatedNorm after the pre-attention, pre-FFN or both RMSNorms", choices=NORM_SITES, main=True)
    rank: int = flag(16, "rank r of GatedNorm's W_down (d->r) and W_up (r->d)")
    layers: str = flag("all", "0-based layers for GatedNorm: all, a:b (b exclusive), a: (to the end) or :b")
    seed: int = 0

    kind = "gated_norm"
    title = "GatedNorm"
    has_parameters = True

    def __post_init__(self) -> None:
        check_sites(self.norms, self.kind)
        check_rank(self.rank, self.kind)
        check_layers(self.layers, self.kind)

    def check_fits(self, hidden_size: int) -> None:
        check_rank_fits(self.rank, hidden_size, self.kind, self.flag_name("rank"))

    def describe(self) -> str:
        return f"GatedNorm on the {self.norms} norm(s), rank {self.rank}, layers {self.layers} (0-based)"

    def install(self, model, *, active: Active | None = None) -> Installed:
        """Add one LowRankGate per (layer, norm) under the decoder layer and a forward hook on that norm."""
        from wemask_cli.method.owned_hooks import register_hook
        from wemask_cli.method.remedies import LowRankGate, NormOutputGate

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
