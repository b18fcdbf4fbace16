"""`wemask probe`: flags and console output; the work is in `wemask_cli.commands.probe`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from wemask_cli.cli import options
from wemask_cli.runtime.ranks import main_only

PROBE_NAMES = "permute-norm, uniform-norm, zero-ffn, down-svd, patch, swap-layers"  # the built-ins, for --help


def probe(
    model: options.ModelOpt = None,
    probe_names: Annotated[
        Optional[list[str]],
        typer.Option("--probe", "-p", metavar="NAME", help=f"Run this probe (repeatable; default: every one that applies: {PROBE_NAMES}, and plugins')."),
    ] = None,
    me_layer: Annotated[
        Optional[int], typer.Option(min=0, help="0-based ME layer to probe (default: located on the prompts, as wemask locate finds it).")
    ] = None,
    seed: Annotated[int, typer.Option("--permute-seed", help="permute-norm: the seed of the permutation.")] = 0,
    top_k: Annotated[int, typer.Option(help="down-svd: how many of the down projection's largest singular directions to remove.")] = 1,
    patch_position: Annotated[int, typer.Option(help="patch: the position (0-based; 1 or more) that receives the first token's massive component.")] = 1,
    swap_with: Annotated[
        Optional[int],
        typer.Option(
            min=0, help="swap-layers: the layer (0-based) whose parameters trade with the ME layer's (default: the nearest of its shapes, before it first)."
        ),
    ] = None,
    prompts: options.PromptsOpt = None,
    dataset: options.DatasetOpt = None,
    text_field: options.TextFieldOpt = "text",
    num_prompts: options.NumPromptsOpt = None,
    max_length: options.MaxLengthOpt = 256,
    batch_size: options.MeasureBatchOpt = 8,
    mask_rate: Annotated[
        Optional[list[str]],
        typer.Option("--mask-rate", "-r", metavar="R", help="Also measure every run with WeMask at rate R from the ME layer (repeatable or comma list)."),
    ] = None,
    json_out: options.JsonReportOpt = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG: one panel per probe, norm and sink mass per layer against the unmodified model.")] = None,
    dtype: options.DtypeOpt = "auto",
    base_quantization: options.BaseQuantizationOpt = "recorded",
    overwrite: options.ReplaceOpt = False,
    trust_remote_code: options.TrustRemoteCodeOpt = False,
):
    """Causal tests of the ME layer (0-based): edit it one way at a time and measure the first token's norm jump,
    its norm downstream, the attention sink's mass and where the sink lands, against the unmodified model."""
    from wemask_cli.commands.probe import ProbeRequest
    from wemask_cli.commands.probe import probe as run_probe_command
    from wemask_cli.mask_request.flags import parse_mask_rates
    from wemask_cli.render.common import console, err_console
    from wemask_cli.render.probe import probe_mask_rates_table, probe_plot, probe_table

    request = ProbeRequest(
        model=model, prompts=prompts, dataset=dataset, text_field=text_field, num_prompts=num_prompts, max_length=max_length,
        batch_size=batch_size, probes=list(probe_names or []), me_layer=me_layer, seed=seed, top_k=top_k,
        patch_position=patch_position, swap_with=swap_with, mask_rates=parse_mask_rates(",".join(mask_rate)) if mask_rate else [],
        json_out=json_out, plot=plot, dtype=dtype, base_quantization=base_quantization, overwrite=overwrite,
        trust_remote_code=trust_remote_code,
    )
    report, written = run_probe_command(request, plot=probe_plot)
    console.print(probe_table(report))
    if report["settings"]["mask_rates"]:
        console.print(probe_mask_rates_table(report))
    for skipped in report["skipped"]:
        err_console.print(f"Skipped {skipped['probe']}: {skipped['reason']}")
    for path in written:
        err_console.print(f"Wrote {path}")


def register(app: typer.Typer) -> None:
    app.command()(main_only(probe))  # under a launcher: rank 0 works, the others wait
