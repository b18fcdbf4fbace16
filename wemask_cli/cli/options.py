"""Option types shared by several commands (typer `Annotated` aliases), and how every command shows its switches."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model", "-m",
        help="Hub id, local model directory, .gguf file, or omit for the embedded SmolLM2-135M-Instruct. A training run's "
        "folder brings the remedies it trained (GatedNorm, ...: its interventions.json), re-applied on load.",
    ),
]
DtypeOpt = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: checkpoint dtype on GPU, float32 on CPU).")]
BaseQuantizationOpt = Annotated[
    str,
    typer.Option(
        help="recorded | none | 4bit | 8bit: how to load the base model (bitsandbytes). recorded: as the training run in --model "
        "loaded it (a QLoRA run's 4-bit or 8-bit base, from its wemask_run.json), else unquantized."
    ),
]
MaskRateOpt = Annotated[
    Optional[str],
    typer.Option("--mask-rate", "-r", help="Share r in [0, 1] of dims to mask; a comma list (0,0.3,1.0) runs each rate."),
]
MeLayerOpt = Annotated[
    Optional[str],
    typer.Option("--me-layer", help="0-based ME layer, or 'auto' to locate it (cached per model; the default with a positive --mask-rate)."),
]
SelectOpt = Annotated[Optional[str], typer.Option(help="weight (the method: top |RMSNorm weight|) | activation | random.")]
LayersOpt = Annotated[
    Optional[str],
    typer.Option(help="from-me (default) | me-only | all | a:b (0-based, b exclusive) | a: (to the last layer) | :b (from layer 0)."),
]
StrengthOpt = Annotated[Optional[float], typer.Option(help="Masking strength in [0, 1]: dims are multiplied by 1 - strength.")]
TokensOpt = Annotated[
    Optional[str],
    typer.Option(
        help="first (default: the first real token of each sequence) | massive (also any prompt token whose norm is > 20x the median; "
        "transformers engine only)."
    ),
]
ReplaceOpt = Annotated[bool, typer.Option("--overwrite", help="Replace output files that already exist.")]
VllmMemoryOpt = Annotated[
    Optional[float],
    typer.Option(help="--engine vllm: GiB of KV cache on CPU (default: sized from the job, or VLLM_CPU_KVCACHE_SPACE), "
                 "share of the GPU on GPU (default: vLLM's 0.9)."),
]
TensorParallelOpt = Annotated[
    int,
    typer.Option("--tensor-parallel-size",
                 help="An engine with workers (vLLM's name): split each layer across N workers (GPUs; on CPU, processes)."),
]
DataParallelOpt = Annotated[
    int,
    typer.Option("--data-parallel-size", help="An engine with workers (vLLM's name): N engine replicas, each serving its share of requests."),
]
TrustRemoteCodeOpt = Annotated[
    bool,
    typer.Option("--trust-remote-code", help="Run the Python code the model ships (an auto_map in its config.json), as a run "
                 "trained with it needs; only for a source you trust. Off by default, and never asked on stdin."),
]


class SwitchesWithoutType:
    """A command (or group) whose switches (--overwrite, --use-peft/--no-use-peft, --help) show no `<bool>` in the help:
    typer's rich help gives every option a type column, a switch takes no value."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class Command(SwitchesWithoutType, TyperCommand):
    """Every wemask command's class (cli/commands.py gives it to each command a cli module registers)."""


def __getattr__(name: str):
    """`EngineOpt`, built when a command's flags are: its help lists the registered engines (their plugins load)."""
    if name != "EngineOpt":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from wemask_cli.commands import engine_help

    return Annotated[str, typer.Option(help=engine_help())]
