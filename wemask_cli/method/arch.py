"""Architecture adapter: where each decoder layer keeps its attention, norms and FFN parts.

One table row per architecture family; everything that reads model internals goes through here. A layer's
parts are looked up once; a part a family lacks is None, and only the feature that needs it refuses (`need`),
in one line naming the part and the feature. Three layouts:
- pre-norm (Llama, Qwen, Mistral, Phi-3, Granite, the MoE families; Gemma adds post-branch norms): a norm feeds
  the attention, and WeMask selects by its weight;
- post-norm (OLMo-2: norms after attention and FFN, none before): the attention reads the residual stream,
  which the previous layer's post-FFN norm wrote last; WeMask selects by that norm's weight (layer 0 has none);
- parallel (Cohere 2: one norm feeds attention and FFN side by side): that norm is both the attention's and
  the FFN's.
An FFN with an `experts` module is a mixture of experts (transformers' fused expert tensors); the router's
choice is read from the experts' call (see collect.py), a shared expert from `shared_expert(s)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from wemask_cli.runtime.errors import WeMaskError

SHARED_EXPERTS = ("shared_expert", "shared_experts")  # Qwen2-MoE; DeepSeek
PART_WORDS = {
    "attn_norm": "norm before the attention",
    "mask_norm": "norm whose weight selects WeMask's dims",
    "ffn_norm": "norm before the FFN",
}


@dataclass(frozen=True)
class ArchSpec:
    """Attribute names inside one decoder layer (None: the family has no such part), and the norm's scale offset
    (1 for Gemma's `1 + w`). `mask_norm_previous`: the mask norm is the previous layer's module of that name."""

    layout: str = "pre-norm"
    attention: str = "self_attn"
    attn_norm: str | None = "input_layernorm"
    mask_norm_previous: str | None = None
    ffn_norm: str | None = "post_attention_layernorm"
    ffn: str = "mlp"
    post_attn_norm: str | None = None
    post_ffn_norm: str | None = None
    up: str | None = "up_proj"
    gate: str | None = "gate_proj"
    down: str = "down_proj"
    gate_up: str | None = None  # fused [gate | up] projection (Phi-3)
    norm_offset: float = 0.0


LLAMA_LIKE = ArchSpec()
GEMMA_LIKE = ArchSpec(
    ffn_norm="pre_feedforward_layernorm",
    post_attn_norm="post_attention_layernorm",
    post_ffn_norm="post_feedforward_layernorm",
    norm_offset=1.0,
)
POST_NORM = ArchSpec(
    layout="post-norm",
    attn_norm=None,
    mask_norm_previous="post_feedforward_layernorm",
    ffn_norm=None,
    post_attn_norm="post_attention_layernorm",
    post_ffn_norm="post_feedforward_layernorm",
)
PARALLEL = ArchSpec(layout="parallel", ffn_norm="input_layernorm")
ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": LLAMA_LIKE,
    "mistral": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,
    "qwen3": LLAMA_LIKE,
    "granite": LLAMA_LIKE,
    "qwen2_moe": LLAMA_LIKE,
    "qwen3_moe": LLAMA_LIKE,
    "mixtral": LLAMA_LIKE,
    "gpt_oss": LLAMA_LIKE,
    "deepseek_v3": LLAMA_LIKE,
    "phi3": ArchSpec(up=None, gate=None, gate_up="gate_up_proj"),
    "gemma2": GEMMA_LIKE,
    "gemma3": GEMMA_LIKE,
    "gemma3_text": GEMMA_LIKE,
    "olmo2": POST_NORM,
    "cohere2": PARALLEL,
}


def supported_families() -> str:
    """The families the adapter knows, for every message that lists them (generated, so never out of date)."""
    return ", ".join(f"{name} ({spec.layout})" for name, spec in sorted(ARCHITECTURES.items()))


@dataclass(frozen=True)
class LayerParts:
    """The modules of one decoder layer that WeMask and locate use (None where the family has no such part)."""

    index: int
    layer: nn.Module
    attention: nn.Module
    attn_norm: nn.Module | None
    ffn_norm: nn.Module | None
    ffn: nn.Module
    post_ffn_norm: nn.Module | None
    spec: ArchSpec
    mask_norm: nn.Module | None = None
    post_attn_norm: nn.Module | None = None
    family: str = "llama"

    def __post_init__(self) -> None:
        if self.mask_norm is None and self.spec.mask_norm_previous is None:
            object.__setattr__(self, "mask_norm", self.attn_norm)

    def need(self, part: str, feature: str) -> nn.Module:
        """The part `feature` needs, or a WeMaskError naming both."""
        module = getattr(self, part)
        if module is None:
            where = part_source(self.spec, part)
            raise WeMaskError(
                f"model_type={self.family!r} ({self.spec.layout}): layer {self.index} has no {PART_WORDS[part]}"
                f"{f' ({where})' if where else ''}, which {feature} needs{refusal_hint(part, self.spec)}"
            )
        return module

    def attn_scale(self, feature: str = "WeMask's --select weight") -> torch.Tensor:
        """w_eff of the norm that selects WeMask's dims (float32): `w`, or `1 + w` for Gemma-style norms."""
        return effective_scale(self.need("mask_norm", feature), self.spec.norm_offset)

    def ffn_scale(self) -> torch.Tensor | None:
        """w_eff of the pre-FFN norm (float32); None when the layer has none (post-norm)."""
        return self.scale_of("ffn_norm")

    def scale_of(self, part: str) -> torch.Tensor | None:
        """w_eff of the norm `part` (float32), None when the layer has none."""
        module = getattr(self, part)
        return None if module is None else effective_scale(module, self.spec.norm_offset)

    @property
    def experts(self) -> nn.Module | None:
        """The routed experts of a mixture-of-experts FFN (None for a dense FFN)."""
        return getattr(self.ffn, "experts", None)

    @property
    def shared_experts(self) -> nn.Module | None:
        return next((m for name in SHARED_EXPERTS if (m := getattr(self.ffn, name, None)) is not None), None)

    def ffn_projections(self) -> dict[str, nn.Module]:
        """A dense FFN's linear maps by role: up, gate, down, or gate_up when fused (empty for an MoE block)."""
        if self.experts is not None:
            return {}
        names = {"up": self.spec.up, "gate": self.spec.gate, "gate_up": self.spec.gate_up, "down": self.spec.down}
        return {role: getattr(self.ffn, name) for role, name in names.items() if name is not None}


def part_source(spec: ArchSpec, part: str) -> str:
    """Where the family keeps `part` ('' when it has none)."""
    if part == "mask_norm":
        return f"the previous layer's {spec.mask_norm_previous}" if spec.mask_norm_previous else spec.attn_norm or ""
    return getattr(spec, part, None) or ""


def refusal_hint(part: str, spec: ArchSpec) -> str:
    if part == "mask_norm" and spec.mask_norm_previous:
        return ": mask from --me-layer 1 or later, or choose dims with --select random or activation"
    if part_source(spec, part):
        return f"; WeMask supports {supported_families()} and decoders with one of these layouts"
    return f" (the {spec.layout} layout has none): leave that feature out for this model"


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
            f"WeMask supports {supported_families()} and decoders with one of these layer layouts"
        )
    return layers


def layer_module(layer: nn.Module, name: str | None) -> nn.Module | None:
    return getattr(layer, name, None) if name else None


def resolve_layers(model: nn.Module) -> list[LayerParts]:
    """Every decoder layer's parts; a WeMaskError only when a layer lacks what every feature needs."""
    kind = model_type(model)
    spec = ARCHITECTURES.get(kind, LLAMA_LIKE)
    layers = decoder_layers(model)
    parts = []
    for index, layer in enumerate(layers):
        for role in ("attention", "ffn"):
            if layer_module(layer, getattr(spec, role)) is None:
                raise WeMaskError(
                    f"model_type={kind!r}: layer {index} has no '{getattr(spec, role)}' ({role}), which every wemask "
                    f"feature needs; WeMask supports {supported_families()} and decoders with one of these layouts"
                )
        previous = layers[index - 1] if index > 0 else None
        found = {role: layer_module(layer, getattr(spec, role)) for role in
                 ("attention", "attn_norm", "ffn_norm", "ffn", "post_attn_norm", "post_ffn_norm")}  # fmt: skip
        if spec.mask_norm_previous:
            found["mask_norm"] = layer_module(previous, spec.mask_norm_previous) if previous is not None else None
        parts.append(LayerParts(index=index, layer=layer, spec=spec, family=kind, **found))
    dense = next((part for part in parts if part.experts is None), None)
    names = (spec.up, spec.gate, spec.gate_up, spec.down)
    missing = [name for name in names if dense is not None and name and not hasattr(dense.ffn, name)]
    if missing:
        raise WeMaskError(
            f"model_type={kind!r}: the FFN of layer {dense.index} has no {', '.join(missing)} and no experts; WeMask "
            f"supports {supported_families()}"
        )
    return parts


def hidden_size(parts: list[LayerParts]) -> int:
    """d, the residual stream's width, read from the first layer's attention input projection or a norm."""
    for part in parts:
        for module in (part.mask_norm, part.attn_norm, part.ffn_norm, part.post_ffn_norm):
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.Tensor) and weight.dim() == 1:
                return weight.numel()
    raise WeMaskError(f"model_type={parts[0].family!r}: cannot read the hidden size from any norm")
