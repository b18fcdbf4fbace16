"""PreAffine (kind "pre_affine"): the chosen RMSNorms see λ ⊙ x instead of x, λ learnable and starting at 1."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions.base import Active, Installed, Intervention
from wemask_cli.interventions.common import NORM_SITES, check_layers, check_sites, norm_sites
from wemask_cli.interventions.flags import flag
from wemask_cli.interventions.registry import register


@register
@dataclass
class PreAffine(Intervention):
    """RMSNorm(λ ⊙ x) at the pre-attention ('attn'), pre-FFN ('ffn') or both norms; λ = 1 at step 0."""

    norms: str = flag("both", "PreAffine: a learnable scale before the pre-attention, pre-FFN or both RMSNorms", choices=NORM_SITES, main=True)
    layers: str = flag("all", "0-based layers for PreAffine: all, a:b (b exclusive), a: (to the end) or :b")

    kind = "pre_affine"
    title = "PreAffine"
    has_parameters = True

    def __post_init__(self) -> None:
        check_sites(self.norms, self.kind)
        check_layers(self.layers, self.kind)

    def describe(self) -> str:
        return f"PreAffine on the {self.norms} norm(s), layers {self.layers} (0-based)"

    def install(self, model, *, active: Active | None = None) -> Installed:
        """Add one Scale per (layer, norm) under the decoder layer and a forward pre-hook on that norm."""
        from wemask_cli.method.owned_hooks import register_hook
        from wemask_cli.method.remedies import NormInputScale, Scale

        installed = Installed(self)
        with installed.building():
            for l, parts, site, norm in norm_sites(model, self.layers, self.norms, self.kind):
                scale = Scale(norm.weight.shape[-1], device=norm.weight.device, dtype=norm.weight.dtype)
                installed.add_module(f"{l}.{site}", parts.layer, f"wemask_pre_affine_{site}", scale)
                hook = NormInputScale(scale, active)
                installed.records.append(register_hook(norm, self.kind, l, hook, pre=True, with_kwargs=True))
        return installed
