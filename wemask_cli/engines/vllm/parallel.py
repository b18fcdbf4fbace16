"""vLLM's parallelism (--tensor-parallel-size, --data-parallel-size, vLLM's names), checked in one line before vLLM
starts. The mask needs nothing per worker: vLLM keeps every RMSNorm weight whole on each tensor-parallel rank (only
the linear layers are split), so each worker chooses the same top-r·d dims from the same full weight, and the
attention input it masks is the full hidden state (tests/test_vllm_parallel.py checks both)."""

from __future__ import annotations

import os

from wemask_cli.engines.vllm.tensor_mask import VllmEngineError

FLAGS = ("--tensor-parallel-size", "--data-parallel-size")


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
            f"--data-parallel-size {data}: vLLM's in-process engine (wemask infer/eval) runs one engine, which vLLM "
            "refuses to split across data-parallel ranks: use `wemask vllm-serve --data-parallel-size N`, or "
            "--tensor-parallel-size"
        )
    workers = tensor * data
    devices = torch.cuda.device_count() if on_gpu else os.cpu_count() or 1
    kind = "GPUs" if on_gpu else "CPU cores (vLLM's CPU build gives each worker its own cores)"
    if workers > devices:
        raise VllmEngineError(
            f"--tensor-parallel-size {tensor} x --data-parallel-size {data} needs {workers} workers but this machine has "
            f"{devices} {kind}: lower them so that their product is at most {devices}"
        )
