"""The `wemask` command line: parses flags, calls one function per command, turns user errors into one line.

Every command's work lives outside this module; here are only flags, help and error handling.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import WeMaskError

app = typer.Typer(
    help="WeMask: mask the massive-activation token's attention input, at inference or while fine-tuning with TRL.\n\n"
    "Layer indices are 0-based everywhere (layer l is model.model.layers[l]).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

@app.callback()
def wemask() -> None:
    """WeMask for LLM inference and TRL fine-tuning."""


ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help="Hub id, local model directory, .gguf file, or omit for the embedded SmolLM2-135M-Instruct."),
]
DtypeOpt = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: checkpoint dtype on GPU, float32 on CPU).")]
MaskRateOpt = Annotated[
    Optional[str],
    typer.Option("--mask-rate", "-r", help="Share r in [0, 1] of dims to mask; a comma list (0,0.3,1.0) runs each rate."),
]
MeLayerOpt = Annotated[Optional[str], typer.Option("--me-layer", help="0-based ME layer, or 'auto' to locate it (cached per model).")]
SelectOpt = Annotated[Optional[str], typer.Option(help="weight (the method: top |RMSNorm weight|) | activation | random.")]
LayersOpt = Annotated[Optional[str], typer.Option(help="from-me (default) | me-only | all | a:b (0-based, b exclusive).")]
StrengthOpt = Annotated[Optional[float], typer.Option(help="Masking strength in [0, 1]: dims are multiplied by 1 - strength.")]


@app.command()
def infer(
    model: ModelOpt = None,
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", "-p", help="A prompt (repeatable).")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="jsonl with 'prompt' or 'messages', or text lines.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write jsonl: input, completion, WeMask settings.")] = None,
    chat_template: Annotated[bool, typer.Option(help="Apply the model's chat template when it has one.")] = True,
    max_new_tokens: int = 64,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default); > 0 samples.")] = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    dtype: DtypeOpt = "auto",
    mask_rate: MaskRateOpt = None,
    me_layer: MeLayerOpt = None,
    select: SelectOpt = None,
    layers: LayersOpt = None,
    strength: StrengthOpt = None,
):
    """Generate with and without WeMask; several --mask-rate values are shown side by side (one model load).

    Without --mask-rate, the wemask_config.json saved in the model directory is applied, else no mask.
    """
    from .infer import GenerationSettings, read_prompts, run_infer, write_jsonl
    from .masking import MaskFlags, configs_from_flags
    from .models import load_model
    from .render import completions_table, console, err_console

    prompts = read_prompts(prompt, input)
    flags = MaskFlags(mask_rate, me_layer, select, layers, strength)
    with err_console.status("Loading model..."):
        loaded = load_model(model, dtype=dtype)
    configs = configs_from_flags(flags, loaded)
    settings = GenerationSettings(max_new_tokens, temperature, top_p, seed, batch_size, chat_template)
    with err_console.status(f"Generating {len(prompts)} prompt(s) x {len(configs)} setting(s)..."):
        records = run_infer(loaded, prompts, configs, settings)
    console.print(completions_table(records))
    if output:
        write_jsonl(records, output)
        err_console.print(f"Wrote {len(records)} records to {output}")


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        app()
    except WeMaskError as err:
        print(f"wemask: error: {err}", file=sys.stderr)
        sys.exit(2)
