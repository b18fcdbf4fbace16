"""Option types shared by several commands (typer `Annotated` aliases), and how every command shows its switches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from wemask_cli.prompts.files import PROMPT_FILE_LAYOUTS

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


def intervention_option(dest: str) -> object:
    """The typer option of a flag every command takes, as its intervention declares it (WeMask's: --mask-rate, ...)."""
    from wemask_cli.interventions.registry import everywhere_flags

    spec = everywhere_flags()[dest]
    return Annotated[Optional[spec.type], typer.Option(spec.name, *spec.short, help=spec.help)]


MaskRateOpt, MeLayerOpt, SelectOpt, LayersOpt, StrengthOpt, TokensOpt = (
    intervention_option(dest) for dest in ("mask_rate", "me_layer", "select", "layers", "strength", "tokens"))
# the prompts and report of a measuring command (locate, probe)
PromptsOpt = Annotated[Optional[Path], typer.Option(help=f"Prompt file: {PROMPT_FILE_LAYOUTS} (default: the bundled locate_prompts.jsonl).")]
DatasetOpt = Annotated[Optional[str], typer.Option(help="Local .jsonl/.json/.parquet/.csv file or hub dataset name instead of --prompts.")]
TextFieldOpt = Annotated[str, typer.Option(help="Column of --dataset holding the text (or messages).")]
NumPromptsOpt = Annotated[Optional[int], typer.Option(help="Use the first N prompts (default: all of --prompts, 32 of --dataset).")]
MaxLengthOpt = Annotated[int, typer.Option(help="Truncate prompts to this many tokens.")]
MeasureBatchOpt = Annotated[int, typer.Option(help="Prompts per forward pass (memory does not grow with --num-prompts).")]
JsonReportOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the full report (stable keys: the docs' Output files page).")]
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
