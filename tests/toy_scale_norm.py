"""A toy intervention declared outside the package, as a third-party one would be (tests/test_intervention_plugin.py):
ScaleNorm multiplies each chosen layer's attention-norm output by one learnable scalar, starting at 1.

Torch-free at import, like the built-in kinds, so `wemask sft --help` stays fast with the plugin installed."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions import Installed, Intervention, flag, register
from wemask_cli.interventions.common import check_layers, norm_sites


class ScaledOutput:
    """Forward hook: the norm's output times the scalar (the identity while `active` says no)."""

    def __init__(self, scale, active):
        self.scale, self.active = scale, active

    def __call__(self, module, args, output):
        if self.active is not None and not self.active():
            return output
        return output * self.scale.weight


@register
@dataclass
class ScaleNorm(Intervention):
    """s · RMSNorm(x) at the attention norm of the chosen layers, one learnable s per layer, s = 1 at step 0."""

    layers: str = flag("all", "0-based layers for ScaleNorm: all, a:b (b exclusive), a: (to the end) or :b")

    kind = "scale_norm"
    has_parameters = True
    switch = "a learnable scalar times each attention norm's output (a toy plugin from tests/)"

    def __post_init__(self) -> None:
        check_layers(self.layers, self.kind)

    def describe(self) -> str:
        return f"ScaleNorm on the attention norms, layers {self.layers} (0-based)"

    def install(self, model, *, active=None) -> Installed:
        from wemask_cli.method.owned_hooks import register_hook
        from wemask_cli.method.remedies import Scale

        installed = Installed(self)
        with installed.building():
            for l, parts, site, norm in norm_sites(model, self.layers, "attn", self.kind):
                scale = Scale(1, device=norm.weight.device, dtype=norm.weight.dtype)
                installed.add_module(f"{l}.{site}", parts.layer, "toy_scale_norm", scale)
                installed.records.append(register_hook(norm, self.kind, l, ScaledOutput(scale, active), pre=False))
        return installed
