"""vLLM's parallelism (--tensor-parallel-size, --data-parallel-size, vLLM's names), checked in one line before vLLM
starts, and the CPU cores of vLLM-CPU's workers. The mask needs nothing per worker: vLLM keeps every RMSNorm weight
whole on each tensor-parallel rank (only the linear layers are split), so each worker chooses the same top-r·d dims
from the same full weight, and the attention input it masks is the full hidden state (tests/test_vllm_parallel.py
checks both, with tensor parallel 2 on a CPU)."""

from __future__ import annotations

import os
from contextlib import contextmanager

from wemask_cli.engines.vllm.tensor_mask import VllmEngineError

FLAGS = ("--tensor-parallel-size", "--data-parallel-size")
BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"  # vLLM-CPU's cores per worker: "auto" (one NUMA node each), or "0|1|..."


def cpu_ids() -> list[int]:
    """The CPU cores this process may run on (its affinity), which vLLM-CPU shares out among its workers."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


@contextmanager
def cpu_workers_bound(tensor: int, data: int, on_gpu: bool):
    """While vLLM starts its workers on a CPU: each of the tensor x data workers gets its own cores
    (VLLM_CPU_OMP_THREADS_BIND, unless the user set it; given back afterwards) where vLLM's automatic binding would
    refuse: it gives each worker a NUMA node of its own and stops ("Not enough allowed NUMA nodes to bind threads of
    N local CPUWorkers") on a machine with fewer nodes."""
    from wemask_cli.compat.vllm import visible_numa_nodes
    from wemask_cli.engines.vllm.colocate import restore_environment

    workers, saved = tensor * data, {BIND_VARIABLE: os.environ.get(BIND_VARIABLE)}
    if not on_gpu and workers > 1 and os.environ.get(BIND_VARIABLE, "auto") == "auto" and len(visible_numa_nodes()) < workers:
        cores = cpu_ids()
        share = len(cores) // workers  # check_parallel: at least one each
        os.environ[BIND_VARIABLE] = "|".join(",".join(map(str, cores[rank * share:(rank + 1) * share])) for rank in range(workers))
    try:
        yield
    finally:
        restore_environment(saved)


def check_heads(model: dict, tensor: int) -> None:
    """vLLM splits attention heads across tensor-parallel workers: refuse, before it starts, a model (config.json as a
    dict) whose head count the size does not divide."""
    heads = model.get("num_attention_heads")
    if tensor > 1 and heads and int(heads) % tensor:
        raise VllmEngineError(
            f"--tensor-parallel-size {tensor}: this model's {heads} attention heads do not split evenly across {tensor} "
            "workers (vLLM needs a divisor): use a size that divides it, or 1"
        )


def check_parallel(tensor: int, data: int, on_gpu: bool, *, in_process: bool) -> None:
    """Refuse sizes this machine or this vLLM cannot run: below 1, more workers than GPUs (on CPU: than cores,
    one per worker at least), and data parallelism in wemask's in-process engine (vLLM's `LLM` runs one engine)."""
    import torch

    for flag, size in zip(FLAGS, (tensor, data)):
        if size < 1:
            raise VllmEngineError(f"{flag} {size} is not valid: use a whole number >= 1 (1: no parallelism)")
    if data > 1 and in_process:
        raise VllmEngineError(
            f"--data-parallel-size {data}: wemask infer/eval run vLLM's offline LLM, one engine in this process, "
            "which vLLM refuses to split across data-parallel ranks (LLM(data_parallel_size>1) is not supported for "
            "single-process usage): use `wemask vllm-serve --data-parallel-size N`, or "
            "--tensor-parallel-size"
        )
    workers = tensor * data
    devices = torch.cuda.device_count() if on_gpu else len(cpu_ids())
    kind = "GPUs" if on_gpu else "CPU cores (vLLM's CPU build gives each worker its own cores)"
    if workers > devices:
        raise VllmEngineError(
            f"--tensor-parallel-size {tensor} x --data-parallel-size {data} needs {workers} workers but this machine has "
            f"{devices} {kind}: lower them so that their product is at most {devices}"
        )
