"""PreAffine (kind "pre_affine"): the chosen RMSNorms see λ ⊙ x instead of x, λ learnable and starting at 1."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Active, FlagSpec, Installed, Intervention
from .common import check_layers, check_sites, extras_without_main, norm_sites, off
from .registry import register


@register
@dataclass
class PreAffine(Intervention):
    """RMSNorm(λ ⊙ x) at the pre-attention ('attn'), pre-FFN ('ffn') or both norms; λ = 1 at step 0."""

    norms: str = "both"
    layers: str = "all"

    kind = "pre_affine"
    has_parameters = True
    FLAGS = (
        FlagSpec("--pre-affine", str, "PreAffine (a learnable scale before the norm) at attn, ffn or both", None, ("attn", "ffn", "both")),
        FlagSpec("--pre-affine-layers", str, "0-based layers for PreAffine: all, a:b (b exclusive) or a: (to the end)", "all"),
    )

    def __post_init__(self) -> None:
        check_sites(self.norms, self.kind)
        check_layers(self.layers, self.kind)

    @classmethod
    def from_options(cls, options: dict) -> "PreAffine | None":
        if off(options.get("pre_affine")):
            extras_without_main(options, "pre_affine", {"pre_affine_layers": "all"})
            return None
        return cls(norms=options["pre_affine"], layers=options.get("pre_affine_layers") or "all")

    def describe(self) -> str:
        return f"PreAffine on the {self.norms} norm(s), layers {self.layers} (0-based)"

    def install(self, model, *, active: Active | None = None) -> Installed:
        """Add one Scale per (layer, norm) under the decoder layer and a forward pre-hook on that norm."""
        from ..method.hooks import register_hook
        from ..method.remedies import NormInputScale, Scale

        installed = Installed(self)
        with installed.building():
            for l, parts, site, norm in norm_sites(model, self.layers, self.norms, self.kind):
                scale = Scale(norm.weight.shape[-1], device=norm.weight.device, dtype=norm.weight.dtype)
                installed.add_module(f"{l}.{site}", parts.layer, f"wemask_pre_affine_{site}", scale)
                hook = NormInputScale(scale, active)
                installed.records.append(register_hook(norm, self.kind, l, hook, pre=True, with_kwargs=True))
        return installed
