"""`wemask infer`'s flags and console output (built when the command runs: --engine lists the registered engines);
the work is in `wemask_cli.commands.infer`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from wemask_cli.cli.options import (
    BaseQuantizationOpt,
    DataParallelOpt,
    DtypeOpt,
    EngineOpt,
    LayersOpt,
    MaskRateOpt,
    MeLayerOpt,
    ModelOpt,
    ReplaceOpt,
    SelectOpt,
    StrengthOpt,
    TensorParallelOpt,
    TokensOpt,
    TrustRemoteCodeOpt,
    VllmMemoryOpt,
)
from wemask_cli.commands import DEFAULT_ENGINE
from wemask_cli.prompts.files import PROMPT_FILE_LAYOUTS
from wemask_cli.runtime.ranks import is_main_process


def infer(
    model: ModelOpt = None,
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", "-p", help="A prompt (repeatable).")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help=f"Prompt file: {PROMPT_FILE_LAYOUTS}.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write jsonl: input, completion, WeMask settings.")] = None,
    chat_template: Annotated[bool, typer.Option(help="Apply the model's chat template when it has one.")] = True,
    max_new_tokens: int = 64,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default); > 0 samples.")] = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    dtype: DtypeOpt = "auto",
    base_quantization: BaseQuantizationOpt = "recorded",
    mask_rate: MaskRateOpt = None,
    me_layer: MeLayerOpt = None,
    select: SelectOpt = None,
    layers: LayersOpt = None,
    strength: StrengthOpt = None,
    tokens: TokensOpt = None,
    overwrite: ReplaceOpt = False,
    engine: EngineOpt = DEFAULT_ENGINE,
    vllm_memory: VllmMemoryOpt = None,
    tensor_parallel_size: TensorParallelOpt = 1,
    data_parallel_size: DataParallelOpt = 1,
    trust_remote_code: TrustRemoteCodeOpt = False,
):
    """`wemask infer` (its help: cli/infer.py's INFER_HELP)."""
    from wemask_cli.commands.infer import GenerationSettings, InferRequest
    from wemask_cli.commands.infer import infer as run_infer_command
    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.render.common import console, err_console
    from wemask_cli.render.infer import completions_table

    request = InferRequest(
        model=model, mask=MaskRequest.parse(mask_rate, me_layer, select, layers, strength, tokens),
        settings=GenerationSettings(max_new_tokens, temperature, top_p, seed, batch_size, chat_template), prompts=prompt,
        input=input, output=output, overwrite=overwrite, dtype=dtype, base_quantization=base_quantization, engine=engine,
        vllm_memory=vllm_memory, trust_remote_code=trust_remote_code, parallel=(tensor_parallel_size, data_parallel_size),
    )
    records = run_infer_command(request)
    if not is_main_process():
        return  # under a launcher the main process speaks for all
    console.print(completions_table(records))
    if output:
        err_console.print(f"Wrote {len(records)} records to {output}")

