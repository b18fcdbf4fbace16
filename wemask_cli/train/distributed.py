"""How a training run is spread over processes and in what precision, each fact with its source; the one module
that imports DeepSpeed.

Precision comes from one place. `accelerate launch` passes the config's `mixed_precision` to every process as
ACCELERATE_MIXED_PRECISION; when it is bf16 or fp16 it sets the trainer's bf16/fp16 (wemask's CPU default of no
bf16 yields to it), and a --bf16/--fp16 flag or recipe key that says otherwise is refused in one line, before any
model loads (DeepSpeed would fail on every rank; DDP would train in the config's precision while the TRL config
said another). `mixed_precision: 'no'` leaves it to the flags and defaults, as accelerate itself does.

`run_facts` reads what ran from the trainer's accelerator (distributed type, world size, sharding, precision) for
wemask_run.json.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.ranks import LAUNCHER_PRECISION_ENV as PRECISION_ENV
from wemask_cli.runtime.ranks import launcher

PRECISION_FLAGS = ("bf16", "fp16")
GIVEN = ("recipe", "flag")


def launcher_precision() -> str | None:
    """bf16 / fp16 when `accelerate launch` asks for it (its config's mixed_precision, or --mixed_precision)."""
    value = os.environ.get(PRECISION_ENV, "").strip().lower()
    return value if value in PRECISION_FLAGS else None


def launcher_source(precision: str) -> str:
    return f"accelerate config (mixed_precision: {precision})"


def _setting(key: str, value, source: str) -> str:
    return f"--{key} {str(value).lower()}" if source == "flag" else f"{key}: {str(value).lower()} in the recipe"


def apply_launcher_precision(trl_values: dict, trl_source: dict) -> None:
    """Make the launcher's mixed precision the trainer's bf16/fp16 (sources updated); a flag or recipe key that
    contradicts it is one WeMaskError naming both."""
    precision = launcher_precision()
    if precision is None:
        return
    for key in PRECISION_FLAGS:
        wanted = key == precision
        if trl_source.get(key) in GIVEN and trl_values[key] is not None and bool(trl_values[key]) != wanted:
            given = _setting(key, trl_values[key], trl_source[key])
            raise WeMaskError(
                f"precision conflict: the accelerate config sets mixed_precision: {precision} ({PRECISION_ENV}={precision}), "
                f"but {given} asks otherwise: drop {given.split(' in ')[0]} (the accelerate config decides) or change "
                "mixed_precision in the accelerate config"
            )
        if trl_source.get(key) not in GIVEN:
            trl_values[key], trl_source[key] = wanted, launcher_source(precision)


LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")  # what DeepSpeed needs, else it asks MPI


def check_deepspeed_config(trl_values: dict, where: str) -> None:
    """--deepspeed: a DeepSpeed JSON config, in processes a launcher started; else one line, before TRL's config
    is built (DeepSpeed would go looking for MPI: a ModuleNotFoundError for mpi4py)."""
    value = trl_values.get("deepspeed")
    if not value or isinstance(value, dict):
        return
    path = Path(str(value)).expanduser()
    if path.suffix.lower() in (".yaml", ".yml"):
        raise WeMaskError(f"{where} {value}: DeepSpeed reads a JSON config (ds_config.json); an accelerate YAML goes to "
                          f"`accelerate launch --config_file {value} -m wemask_cli ...`")
    if not path.is_file():
        raise WeMaskError(f"{where} {value}: no such file; give DeepSpeed's JSON config")
    missing = [name for name in LAUNCH_ENV if name not in os.environ]
    if missing:
        raise WeMaskError(
            f"{where} {value} needs processes started by a launcher ({', '.join(missing)} not set): run "
            "`torchrun --nproc_per_node N -m wemask_cli ...` or `accelerate launch ... -m wemask_cli ...`, or drop --deepspeed"
        )


def check_quantized_sharding(opts: dict) -> None:
    """bitsandbytes weights cannot be partitioned by ZeRO-3 (call once the TRL config exists: it sets up DeepSpeed)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    bits = "4bit" if opts["load_in_4bit"] else "8bit" if opts["load_in_8bit"] else None
    if bits and is_deepspeed_zero3_enabled():
        raise WeMaskError(
            f"--load-in-{bits} and DeepSpeed ZeRO-3 (zero_stage: 3) exclude each other: ZeRO-3 partitions weights that "
            "bitsandbytes keeps packed; use recipes/accelerate/zero2.yaml or ddp.yaml, or drop the flag"
        )


def gathered(parameters: list):
    """Under ZeRO-3, gather the partitioned `parameters` for reading (a collective); otherwise nothing to do."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(parameters, modifier_rank=None)


def sharding(accelerator) -> str:
    """none | DDP | ZeRO-N | FSDPN: how the run's state is split over its processes."""
    kind = accelerator.distributed_type.value
    if kind == "DEEPSPEED":
        return f"ZeRO-{accelerator.state.deepspeed_plugin.zero_stage}"
    if kind == "FSDP":
        return f"FSDP{getattr(accelerator.state.fsdp_plugin, 'fsdp_version', 1)}"
    return "none" if accelerator.num_processes == 1 else "DDP"


def engine_sources(kind: str, shards: str, trl_sources: dict) -> tuple[str, str]:
    """(source of the distributed type, source of the sharding): a TRL flag or recipe key (--deepspeed, --fsdp),
    the accelerate config, or the launcher (DDP)."""
    key = {"DEEPSPEED": "deepspeed", "FSDP": "fsdp"}.get(kind)
    if key is None:
        started_by = launcher()
        return started_by, started_by
    if trl_sources.get(key) in GIVEN:
        given = f"--{key}" if trl_sources[key] == "flag" else f"{key} in the recipe"
        return given, given
    detail = f"zero_stage: {shards.split('-')[1]}" if kind == "DEEPSPEED" else f"fsdp_version: {shards[4:]}"
    return f"accelerate config (distributed_type: {kind})", f"accelerate config ({detail})"


def _precision_source(trl_sources: dict, precision: str) -> str:
    if precision == "no":
        given = [key for key in PRECISION_FLAGS if trl_sources.get(key) in GIVEN]
        return trl_sources[given[0]] if given else "default"
    if precision in PRECISION_FLAGS:
        return trl_sources.get(precision, "default")
    return launcher_source(precision)


def run_facts(trainer, resolved) -> dict:
    """What ran, read from the trainer's accelerator, each with its source: distributed type, world size,
    sharding, mixed precision (`no`: the weights' own dtype)."""
    accelerator = trainer.accelerator
    trl_sources = resolved.provenance["trl"]
    kind, shards = accelerator.distributed_type.value, sharding(accelerator)
    kind_source, sharding_source = engine_sources(kind, shards, trl_sources)
    processes = accelerator.num_processes
    return {
        "launcher": launcher(),
        "type": {"value": kind, "source": kind_source},
        "world_size": {"value": processes, "source": f"{launcher()} (WORLD_SIZE)" if processes > 1 else "single process"},
        "sharding": {"value": shards, "source": sharding_source},
        "precision": {"value": accelerator.mixed_precision, "source": _precision_source(trl_sources, accelerator.mixed_precision)},
    }
