"""Architecture adapter: where each decoder layer keeps its attention, norms and FFN parts.

One table row per architecture family; everything that reads model internals goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..errors import WeMaskError


@dataclass(frozen=True)
class ArchSpec:
    """Attribute names inside one decoder layer, and the norm's scale offset (1 for Gemma's `1 + w`)."""

    attention: str = "self_attn"
    attn_norm: str = "input_layernorm"
    ffn_norm: str = "post_attention_layernorm"
    ffn: str = "mlp"
    post_ffn_norm: str | None = None
    up: str | None = "up_proj"
    gate: str | None = "gate_proj"
    down: str = "down_proj"
    gate_up: str | None = None  # fused [gate | up] projection (Phi-3)
    norm_offset: float = 0.0


LLAMA_LIKE = ArchSpec()
GEMMA_LIKE = ArchSpec(
    ffn_norm="pre_feedforward_layernorm", post_ffn_norm="post_feedforward_layernorm", norm_offset=1.0
)
ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": LLAMA_LIKE,
    "mistral": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,
    "qwen3": LLAMA_LIKE,
    "olmo2": LLAMA_LIKE,
    "phi3": ArchSpec(up=None, gate=None, gate_up="gate_up_proj"),
    "gemma2": GEMMA_LIKE,
    "gemma3": GEMMA_LIKE,
    "gemma3_text": GEMMA_LIKE,
}


@dataclass(frozen=True)
class LayerParts:
    """The modules of one decoder layer that WeMask and locate use."""

    index: int
    layer: nn.Module
    attention: nn.Module
    attn_norm: nn.Module
    ffn_norm: nn.Module
    ffn: nn.Module
    post_ffn_norm: nn.Module | None
    spec: ArchSpec

    def attn_scale(self) -> torch.Tensor:
        """w_eff of the pre-attention norm (float32): `w`, or `1 + w` for Gemma-style norms."""
        return effective_scale(self.attn_norm, self.spec.norm_offset)

    def ffn_scale(self) -> torch.Tensor:
        """w_eff of the pre-FFN norm (float32)."""
        return effective_scale(self.ffn_norm, self.spec.norm_offset)

    def ffn_projections(self) -> dict[str, nn.Module]:
        """The FFN's linear maps by role: up, gate, down, or gate_up when fused."""
        names = {"up": self.spec.up, "gate": self.spec.gate, "gate_up": self.spec.gate_up, "down": self.spec.down}
        return {role: getattr(self.ffn, name) for role, name in names.items() if name is not None}


def effective_scale(norm: nn.Module, offset: float) -> torch.Tensor:
    weight = getattr(norm, "weight", None)
    if weight is None:
        raise WeMaskError(f"norm module {type(norm).__name__} has no weight: WeMask needs a scaled RMSNorm")
    return weight.detach().float() + offset


def base_model(model: nn.Module) -> nn.Module:
    """The plain transformers model under PEFT wrapping, if any."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def model_type(model: nn.Module) -> str:
    config = getattr(base_model(model), "config", None)
    return getattr(config, "model_type", type(model).__name__)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (also under PEFT)."""
    model = base_model(model)
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else getattr(model, "model", model)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise WeMaskError(
            f"cannot find decoder layers in {type(model).__name__} (model_type={model_type(model)!r}): "
            f"WeMask supports {', '.join(sorted(ARCHITECTURES))} and Llama-like decoders"
        )
    return layers


def resolve_layers(model: nn.Module) -> list[LayerParts]:
    """Every decoder layer's parts, or a WeMaskError naming what is missing."""
    kind = model_type(model)
    spec = ARCHITECTURES.get(kind, LLAMA_LIKE)
    parts = []
    for index, layer in enumerate(decoder_layers(model)):
        found = {}
        for role in ("attention", "attn_norm", "ffn_norm", "ffn", "post_ffn_norm"):
            name = getattr(spec, role)
            module = getattr(layer, name, None) if name else None
            if name and module is None:
                raise WeMaskError(
                    f"model_type={kind!r}: layer {index} has no '{name}' ({role}); WeMask supports "
                    f"{', '.join(sorted(ARCHITECTURES))} and decoders with the same layer layout"
                )
            found[role] = module
        parts.append(LayerParts(index=index, layer=layer, spec=spec, **found))
    missing = [name for name in (spec.up, spec.gate, spec.gate_up, spec.down) if name and not hasattr(parts[0].ffn, name)]
    if missing:
        raise WeMaskError(f"model_type={kind!r}: the FFN has no {', '.join(missing)}; this architecture is not supported")
    return parts
