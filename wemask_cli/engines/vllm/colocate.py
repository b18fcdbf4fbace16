"""TRL's colocated vLLM for `wemask grpo --use-vllm` (TRL's `vllm_mode="colocate"`): rollouts from an in-process
vLLM engine that TRL builds, whose weights TRL refreshes from the trained model before each step's rollouts
(LoRA merged, then unmerged, as TRL does).

`colocated_engine(dtype, masked=...)` wraps the construction of TRL's GRPOTrainer; `mask_rollouts(trainer, config)`
installs the WeMask config on the engine TRL built (the same mask as a tensor op on `positions == 0`, see .mask). The loss,
old-policy and reference passes stay on the hooked transformers model, and TRL's importance-sampling correction
stays on: it compares the two on the same (masked) tokens.

Platform workarounds, active only while TRL builds its engine (tests/test_grpo_vllm.py checks each):
- vLLM on CPU prepacks every linear weight for oneDNN or its sgl kernel and replaces `weight` with an empty
  Parameter (vllm/model_executor/layers/utils.py `dispatch_cpu_unquantized_gemm`), so TRL's weight sync fails
  ("'Parameter' object has no attribute 'weight_loader'"), and a refreshed weight would never reach the packed
  copy (the LM head keeps its weight but computes with a packed one). The engine built here keeps every 2-D
  linear weight and computes with `torch.nn.functional.linear` on it, so each sync is what the next rollout uses.
- TRL passes vLLM no dtype (vLLM turns a float32 model into bfloat16) and no `enforce_eager`: without mixed
  precision the engine gets the trained model's dtype (with --bf16/--fp16, vLLM's choice), and eager mode on CPU.
  In-process engine defaults: VLLM_ENABLE_V1_MULTIPROCESSING=0 (the mask is installed on the model object), and
  on CPU a KV cache sized for --vllm-max-model-length (memory.py) unless VLLM_CPU_KVCACHE_SPACE is set.
- The private names these workarounds replace are reached through wemask_cli.compat.vllm (checked, versioned).
- vLLM-CPU replaces `torch.set_num_threads` for the whole process while starting, and TRL leaves RANK, WORLD_SIZE,
  MASTER_ADDR... set for vLLM's launcher (the next trainer of the process would think it runs distributed): both
  are given back once the trainer is built.
- TRL 1.16 warns that it supports vLLM 0.22-0.31; the calls it makes in colocate mode (LLM, generate with
  processed logprobs, load_weights, reset_prefix_cache) are exercised with vLLM 0.32 by the tests, so that one
  warning is silenced for the 0.32 series only.
"""

from __future__ import annotations

import contextlib
import os

import torch

from wemask_cli.engines.vllm.tensor_mask import BUFFER, VllmEngineError, current_mask, install_wemask
from wemask_cli.method.config import WeMaskConfig

ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def keep_weight(packed, layer: torch.nn.Module, remove_weight: bool) -> None:
    """vLLM-CPU's linear dispatch for TRL's engine: 2-D linear weights stay parameters that torch's linear reads
    (see module doc); other layers (conv, MoE experts) get vLLM's own `packed` handling."""
    if layer.weight.is_meta or layer.weight.ndim != 2:
        packed(layer, remove_weight)
        return
    layer.cpu_linear = torch.nn.functional.linear


def engine_defaults(model, dtype: torch.dtype | None, cpu: bool, job) -> dict:
    """What TRL's `LLM(...)` call gets unless it passes it: `dtype` (None: vLLM's choice) and, on CPU, eager mode and
    a KV cache sized for `job` (a memory.VllmJob; a user's VLLM_CPU_KVCACHE_SPACE is respected)."""
    from wemask_cli.engines.vllm.memory import engine_memory

    defaults = {} if dtype is None else {"dtype": dtype}
    if cpu:
        defaults["enforce_eager"] = True
        name = str(dtype).removeprefix("torch.") if dtype is not None else "auto"
        defaults.update(engine_memory(model.config.to_dict(), name, job, on_gpu=False, context=job.tokens))
    return defaults


@contextlib.contextmanager
def colocated_engine(model, dtype: torch.dtype | None, *, masked: bool, job=None):
    """Wrap the construction of a GRPOTrainer with `use_vllm=True, vllm_mode="colocate"` (see module doc).

    `masked`: the engine is armed at load (wemask plugin, WEMASK_VLLM_ARM=1), so that `mask_rollouts` can install
    the mask also where vLLM compiles the model (GPU). `job`: the rollouts' memory.VllmJob (generation batch,
    --vllm-max-model-length).
    """
    from wemask_cli.compat.vllm import cpu_linear_dispatch, silence_trl_version_warning, trl_engine_defaults
    from wemask_cli.engines.vllm.memory import VllmJob
    from wemask_cli.engines.vllm.plugin import ARM_VARIABLE, activate
    from wemask_cli.engines.vllm.support import check_cpu_attention, require_vllm

    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)
    require_vllm()  # wemask's logging level for the engine
    silence_trl_version_warning()
    activate()  # also when the entry point is not installed (an editable checkout run from source)
    cpu = on_cpu()
    if cpu:
        check_cpu_attention(model.config.to_dict(), "--use-vllm", "drop --use-vllm (transformers generates the rollouts) or train on a GPU")
    set_num_threads = torch.set_num_threads
    saved = {name: os.environ.get(name) for name in (*LAUNCHER_ENV, ARM_VARIABLE)}
    if masked:
        os.environ[ARM_VARIABLE] = "1"
    with contextlib.ExitStack() as stack:
        if cpu:
            stack.enter_context(cpu_linear_dispatch(keep_weight))
        stack.enter_context(trl_engine_defaults(**engine_defaults(model, dtype, cpu, job or VllmJob())))
        try:
            yield
        finally:
            torch.set_num_threads = set_num_threads
            restore_environment(saved)


def restore_environment(saved: dict) -> None:
    """Put back the variables set while the engine was built: TRL's for vLLM's launcher (left set, they make the
    next trainer of the same process, e.g. in a test session, believe it runs distributed) and the arming one."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def mask_rollouts(trainer, config: WeMaskConfig) -> WeMaskConfig | None:
    """Make TRL's colocated engine generate as the trained model does: `config` (dims recorded by the hooks'
    install) when aware and active, else no mask (also over a mask the plugin installed from a saved run's
    folder). Returns the config installed in the engine (None: no mask, or no colocated engine)."""
    from wemask_cli.compat.vllm import colocated_llm

    llm = colocated_llm(trainer)
    if llm is None:
        return None
    if rollout_mask(config) is not None:
        installed = llm.apply_model(lambda model: install_wemask(model, config))[0].config
        if installed.dims != config.dims:
            raise VllmEngineError(f"the vLLM engine chose other dims than the trained model ({installed.dims} against {config.dims})")
    else:
        installed = None
        llm.apply_model(lambda model: install_wemask(model, None) if is_armed(model) else None)
    llm.reset_prefix_cache()
    return installed


def rollout_mask(config: WeMaskConfig | None) -> WeMaskConfig | None:
    """What a trainer's rollouts carry: its config when aware and active, else no mask."""
    return config if config is not None and config.mode == "aware" and config.active else None


def check_engine_mask(trainer, expected: dict | None) -> None:
    """After a step: TRL's colocated engine still holds the trained model's mask ({layer: dims}; None: no mask)."""
    from wemask_cli.compat.vllm import colocated_llm

    llm = colocated_llm(trainer)
    held = llm.apply_model(current_mask)[0] if llm is not None else None
    if llm is not None and held != (expected or {}):
        raise VllmEngineError(
            f"after step {trainer.state.global_step}, TRL's vLLM engine holds the mask {summary(held)} but the trained "
            f"model {summary(expected)}: rollouts no longer match the loss; rerun without --use-vllm and report this"
        )


def engine_mask_check(trainer, expected: dict | None):
    """A TrainerCallback that runs `check_engine_mask` after every optimizer step."""
    from transformers import TrainerCallback

    class EngineHoldsTheMask(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            check_engine_mask(trainer, expected)

    return EngineHoldsTheMask()


def summary(dims: dict | None) -> str:
    return f"on layers {min(dims)}..{max(dims)} ({len(next(iter(dims.values())))} dims)" if dims else "none"


def is_armed(model: torch.nn.Module) -> bool:
    return any(hasattr(module, BUFFER) for module in model.modules())
