"""FSDP for wemask's trainers, on GPUs and on the CPU.

Asked for with TRL's bare `--fsdp` (and `--fsdp_config`; the string "full_shard auto_wrap" is deprecated), or by
`accelerate launch` with an FSDP config (recipes/accelerate/fsdp.yaml sets ACCELERATE_USE_FSDP and FSDP_*). accelerate 1.15 switches to FSDP only
for GPU-type process groups: on the CPU (gloo) every multi-process run is MULTI_CPU, and the FSDP settings are
dropped without a word, so each rank would train the whole model under DDP. `shard_on_cpu` tells accelerate's
shared state, before the trainer builds its Accelerator, that this CPU run is FSDP (compat/accelerate.py, guarded); accelerate then prepares the
model with torch's `fully_shard` (FSDP2), which shards on gloo, and TRL shards DPO's and GRPO's reference model the
same way. FSDP1 needs GPUs: on the CPU it is refused, as is a run that cannot shard at all (one process).
"""

from __future__ import annotations

import os

from wemask_cli.runtime.errors import WeMaskError


def requested(args) -> bool:
    """True when the TRL config (--fsdp) or the launcher (ACCELERATE_USE_FSDP) asks for FSDP."""
    return bool(getattr(args, "fsdp", None)) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def on_cpu(args) -> bool:
    import torch

    return bool(args.use_cpu) or not torch.cuda.is_available()


def settings(args) -> dict:
    """The FSDP plugin's arguments: the TRL config's (--fsdp, --fsdp_config), else the launcher's FSDP_* variables."""
    if getattr(args, "fsdp_plugin_args", None):
        return dict(args.fsdp_plugin_args)
    return {
        "fsdp_version": int(os.environ.get("FSDP_VERSION", "1")),  # accelerate's own default without a version
        "cpu_ram_efficient_loading": os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING", "false").lower() == "true",
    }


def check(resolved) -> None:
    """Before any model loads: refuse what would not shard, in one line."""
    args = resolved.args
    if not requested(args):
        return
    if args.world_size < 2:
        raise WeMaskError(
            "FSDP shards the model across processes and this is one process: start several, e.g. "
            "`torchrun --nproc_per_node 2 -m wemask_cli ...` or `accelerate launch --config_file "
            "recipes/accelerate/fsdp.yaml --num_processes 2 -m wemask_cli ...`, or drop --fsdp"
        )
    if getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        raise WeMaskError("FSDP and DeepSpeed both shard the model and exclude each other: drop --fsdp or the DeepSpeed config")
    plugin = settings(args)
    if on_cpu(args) and plugin["fsdp_version"] != 2:
        raise WeMaskError(
            f"FSDP version {plugin['fsdp_version']} runs on GPUs only; on the CPU use FSDP2: fsdp_version: 2 in the "
            "accelerate config, or --fsdp_config '{\"version\": 2}'"
        )
    if plugin["cpu_ram_efficient_loading"] and resolved.mask.effective_me_layer(None) == "auto":
        raise WeMaskError(
            "--me-layer auto cannot locate on FSDP-sharded weights (fsdp_cpu_ram_efficient_loading loads them on rank 0 "
            "only): run `wemask locate --model M` once and pass --me-layer N, or set fsdp_cpu_ram_efficient_loading: false"
        )
    if plugin["cpu_ram_efficient_loading"] and resolved.mask.rates and any(rate > 0 for rate in resolved.mask.rates):
        raise WeMaskError(
            "WeMask chooses its dims from the norm weights on every rank, and fsdp_cpu_ram_efficient_loading loads them "
            "on rank 0 only: set fsdp_cpu_ram_efficient_loading: false"
        )


def shard_on_cpu(args) -> None:
    """On a CPU run that asks for FSDP: make accelerate's shared state FSDP before the trainer builds its
    Accelerator (which reuses that state), so the model is prepared with `fully_shard`."""
    if not requested(args) or not on_cpu(args) or args.world_size < 2:
        return
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    from wemask_cli.compat.accelerate import force_fsdp

    plugin = FullyShardedDataParallelPlugin(**settings(args)) if getattr(args, "fsdp_plugin_args", None) else FullyShardedDataParallelPlugin()
    if args.mixed_precision != "no":
        plugin.set_mixed_precision(args.mixed_precision)  # what accelerate does for an FSDP state
    Accelerator(cpu=True, mixed_precision=args.mixed_precision, fsdp_plugin=plugin)
    force_fsdp(plugin)


def sharded_parameters(model) -> tuple[int, int]:
    """(parameters this process holds, parameters of the whole model): equal unless the model is sharded."""
    from torch.distributed.tensor import DTensor

    local = total = 0
    for parameter in model.parameters():
        total += parameter.numel()
        local += (parameter.to_local() if isinstance(parameter, DTensor) else parameter).numel()
    return local, total


def callbacks(args) -> list:
    """Under FSDP, a trainer callback that says once training starts how much of the model rank 0 holds."""
    if not requested(args):
        return []
    from transformers import TrainerCallback

    from wemask_cli.runtime.progress import say

    class ShardReport(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if model is not None:
                local, total = sharded_parameters(model)
                say(f"FSDP: rank 0 holds {local:,} of the model's {total:,} parameters")

    return [ShardReport()]
