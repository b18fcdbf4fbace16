"""Gated attention (kind "gated_attention"): o_proj(a ⊙ g(x)), g(x) = 2·σ(W_up · W_down · x) from the attention input x."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions.base import Active, Installed, Intervention
from wemask_cli.interventions.common import check_layers, check_rank, check_rank_fits, layer_indices
from wemask_cli.interventions.flags import flag
from wemask_cli.interventions.registry import register
from wemask_cli.runtime.errors import WeMaskError


@register
@dataclass
class GatedAttention(Intervention):
    """An elementwise gate on the attention output before o_proj, computed from the normed hidden states the
    attention receives (after WeMask, when both are installed). Low rank (the paper uses a full d x d map):
    W_down (d -> rank), W_up (rank -> o_proj inputs), W_up zero so g = 1 at step 0."""

    rank: int = flag(16, "rank of the gated-attention projection")
    layers: str = flag("all", "0-based layers for gated attention: all, a:b (b exclusive), a: (to the end) or :b")
    seed: int = 0

    kind = "gated_attention"
    title = "gated attention"
    has_parameters = True
    switch = "an elementwise 2·sigmoid gate on the attention output, before o_proj"

    def __post_init__(self) -> None:
        check_rank(self.rank, self.kind)
        check_layers(self.layers, self.kind)

    def check_fits(self, hidden_size: int) -> None:
        check_rank_fits(self.rank, hidden_size, self.kind, self.flag_name("rank"))

    def describe(self) -> str:
        return f"gated attention, rank {self.rank}, layers {self.layers} (0-based)"

    def install(self, model, *, active: Active | None = None) -> Installed:
        """Add one LowRankGate per layer under the decoder layer; pre-hooks on the attention and its o_proj."""
        from wemask_cli.method.arch import resolve_layers
        from wemask_cli.method.owned_hooks import register_hook
        from wemask_cli.method.remedies import AttentionOutputGate, LowRankGate

        parts = resolve_layers(model)
        installed = Installed(self)
        with installed.building():
            for l in layer_indices(self.layers, len(parts), self.kind):
                attention = parts[l].attention
                o_proj = getattr(attention, "o_proj", None)
                width = getattr(o_proj, "in_features", None)
                if width is None:
                    raise WeMaskError(f"layer {l}'s attention has no o_proj with in_features: gated attention needs one")
                d = o_proj.out_features  # the attention's input width; a norm of the layer gives device and dtype
                weight = next(n.weight for n in (parts[l].attn_norm, parts[l].post_attn_norm, parts[l].ffn_norm,
                                                 parts[l].post_ffn_norm) if n is not None)  # fmt: skip
                self.check_fits(d)
                seed = self.seed * 1_000_003 + l
                gate = LowRankGate(d, width, self.rank, swish=False, seed=seed, device=weight.device, dtype=weight.dtype)
                installed.add_module(str(l), parts[l].layer, "wemask_gated_attention", gate)
                hook = AttentionOutputGate(gate, active)
                installed.records.append(register_hook(attention, self.kind, l, hook.compute, pre=True, with_kwargs=True))
                installed.records.append(register_hook(o_proj, self.kind, l, hook.apply, pre=True))
        return installed
