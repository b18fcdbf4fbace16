"""How much memory wemask's vLLM engines take, and vLLM start-up failures said in one line.

vLLM's own defaults do not fit a shared machine: on CPU it reserves 92% of the machine's memory (and refuses to
start when less is free), on GPU 90% of the device. wemask asks for what the job needs instead:

- CPU: a KV cache sized from the job (sequences in flight x their tokens, at least one sequence of the model's
  full context, at most DEFAULT_CAP_GIB unless the context needs more), passed as vLLM's `kv_cache_memory_bytes`.
  A user's VLLM_CPU_KVCACHE_SPACE (GiB) is respected; `--vllm-memory GIB` overrides both.
- GPU: `--vllm-memory SHARE` is vLLM's `gpu_memory_utilization` (vLLM's default otherwise).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass

from wemask_cli.runtime.errors import WeMaskError

GIB = 1 << 30
DEFAULT_SEQUENCES = 8
DEFAULT_CAP_GIB = 4.0
CPU_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"
MEMORY_FLAG = "--vllm-memory"
MEMORY_HINT = f"lower {MEMORY_FLAG} (GiB of KV cache on CPU, a share of the GPU) or free memory held by other programs"
DTYPE_BYTES = {"float32": 4, "float": 4, "float64": 8, "double": 8}  # other dtypes vLLM runs: 2 bytes


class VllmStartError(WeMaskError):
    """vLLM could not start (memory, an unsupported model, a missing kernel): one line naming what to change."""


@dataclass(frozen=True)
class VllmJob:
    """What a command will run on the engine: `memory` (--vllm-memory), the sequences in flight at once, and the
    tokens of the longest one (prompt + new tokens; None: unknown, the model's context)."""

    memory: float | None = None
    sequences: int = DEFAULT_SEQUENCES
    tokens: int | None = None


def check_memory_flag(memory: float | None, on_gpu: bool) -> None:
    if memory is None:
        return
    if on_gpu and not 0 < memory <= 1:
        raise WeMaskError(f"{MEMORY_FLAG} {memory:g} is not a share of the GPU: use a number in (0, 1], e.g. 0.5")
    if not on_gpu and not memory > 0:
        raise WeMaskError(f"{MEMORY_FLAG} {memory:g} is not valid: give the KV cache's size in GiB, e.g. 2")


def kv_bytes_per_token(model: dict, dtype: str) -> int | None:
    """Bytes of KV cache one token takes in every layer (keys and values), from a config.json; None if unknown."""
    try:
        layers, heads = int(model["num_hidden_layers"]), int(model["num_attention_heads"])
        kv_heads = int(model.get("num_key_value_heads") or heads)
        head_dim = int(model.get("head_dim") or int(model["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError):
        return None
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES.get(dtype, 2)


def cpu_kv_cache_bytes(model: dict, dtype: str, job: VllmJob, context: int | None = None) -> int:
    """The KV cache for `job` on CPU, for a model of config `model` (config.json's fields): its sequences x tokens,
    at least one full-context sequence (vLLM refuses a cache that cannot hold one), at most DEFAULT_CAP_GIB
    otherwise; DEFAULT_CAP_GIB for an unknown model."""
    model = model.get("text_config") or model
    per_token = kv_bytes_per_token(model, dtype)
    context = context or int(model.get("max_position_embeddings") or 0)
    if per_token is None or context <= 0:
        return int(DEFAULT_CAP_GIB * GIB)
    tokens = job.sequences * min(job.tokens or context, context)
    wanted = min(per_token * tokens, int(DEFAULT_CAP_GIB * GIB))
    needed = per_token * (context + 256)  # one full sequence, with room for vLLM's block rounding
    return int(math.ceil(max(wanted, needed) / (64 << 20)) * (64 << 20))


def engine_memory(model: dict, dtype: str, job: VllmJob, on_gpu: bool, context: int | None = None) -> dict:
    """vLLM's LLM(...) arguments for the job's memory on a model of config `model` (none: vLLM's own choice, or
    the user's environment)."""
    check_memory_flag(job.memory, on_gpu)
    if on_gpu:
        return {} if job.memory is None else {"gpu_memory_utilization": job.memory}
    if job.memory is None and os.environ.get(CPU_VARIABLE):
        return {}  # the user's own setting, which vLLM reads
    size = int(job.memory * GIB) if job.memory is not None else cpu_kv_cache_bytes(model, dtype, job, context)
    check_free_memory(size)
    return {"kv_cache_memory_bytes": size}


def check_free_memory(size: int) -> None:
    """Refuse, before loading, a KV cache larger than the memory free now (vLLM would stop after loading)."""
    import psutil

    free = psutil.virtual_memory().available
    if size > free:
        raise VllmStartError(
            f"vLLM's KV cache would take {size / GIB:.1f} GiB but {free / GIB:.1f} GiB of memory is free: {MEMORY_HINT}"
        )


@contextmanager
def memory_override(arguments: dict):
    """While vLLM starts: an explicit `kv_cache_memory_bytes` wins over VLLM_CPU_KVCACHE_SPACE (which vLLM-CPU
    would apply over it); the variable is given back afterwards."""
    saved = os.environ.pop(CPU_VARIABLE, None) if "kv_cache_memory_bytes" in arguments else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ[CPU_VARIABLE] = saved


@contextmanager
def start_errors(source: str):
    """A vLLM start-up failure becomes one VllmStartError line naming the setting to change; wemask's own
    one-line errors (raised by the plugin while the model loads) pass through."""
    try:
        yield
    except WeMaskError:
        raise
    except Exception as err:  # noqa: BLE001 (vLLM raises ValueError, RuntimeError, AttributeError... at start-up)
        raise VllmStartError(start_failure(source, err)) from None


def start_failure(source: str, err: BaseException) -> str:
    """One line for an exception vLLM raised while starting on `source`."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = (lines[0] if lines else type(err).__name__)[:400]
    lowered = text.lower()
    if "memory" in lowered or "kv cache" in lowered or isinstance(err, MemoryError):
        user = os.environ.get(CPU_VARIABLE)
        hint = MEMORY_HINT + (f" (you set {CPU_VARIABLE}={user} GiB: lower or unset it)" if user else "")
    elif "architecture" in lowered and "support" in lowered:
        hint = "this vLLM cannot run this model: use --engine transformers"
    else:
        hint = "this vLLM build cannot run it on this machine (a missing kernel?): check the vLLM install or use --engine transformers"
    return f"vLLM could not start on {source}: {text}; {hint}"
