"""`wemask locate`: flags and console output; the work is in `wemask_cli.commands.locate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from wemask_cli.cli.options import (
    BaseQuantizationOpt,
    DatasetOpt,
    DtypeOpt,
    JsonReportOpt,
    MaxLengthOpt,
    MeasureBatchOpt,
    ModelOpt,
    NumPromptsOpt,
    PromptsOpt,
    ReplaceOpt,
    TextFieldOpt,
    TrustRemoteCodeOpt,
)
from wemask_cli.runtime.ranks import is_main_process


def locate(
    model: ModelOpt = None,
    prompts: PromptsOpt = None,
    dataset: DatasetOpt = None,
    text_field: TextFieldOpt = "text",
    num_prompts: NumPromptsOpt = None,
    max_length: MaxLengthOpt = 256,
    batch_size: MeasureBatchOpt = 8,
    json_out: JsonReportOpt = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG of the per-layer curves.")] = None,
    mask_rate: Annotated[
        Optional[list[str]],
        typer.Option("--mask-rate", "-r", metavar="R", help="Also measure with WeMask at rate R from the ME layer (repeatable or comma list)."),
    ] = None,
    dtype: DtypeOpt = "auto",
    base_quantization: BaseQuantizationOpt = "recorded",
    overwrite: ReplaceOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
):
    """Find the ME layer (0-based): where the first token's norm jumps by an order of magnitude, written by the FFN.

    Prints per-layer statistics (the ME-layer metrics of WeMask, arXiv:2605.08504; attention and residual sinks,
    arXiv:2601.22966) and a verdict.
    """
    from wemask_cli.commands.locate import LocateRequest
    from wemask_cli.commands.locate import locate as run_locate_command
    from wemask_cli.mask_request.flags import parse_mask_rates
    from wemask_cli.render.common import console, err_console
    from wemask_cli.render.locate import locate_plot, locate_table, mask_rates_table, routing_table

    request = LocateRequest(
        model=model, prompts=prompts, dataset=dataset, text_field=text_field, num_prompts=num_prompts, max_length=max_length,
        batch_size=batch_size, mask_rates=parse_mask_rates(",".join(mask_rate)) if mask_rate else [], json_out=json_out,
        plot=plot, dtype=dtype, base_quantization=base_quantization, overwrite=overwrite, trust_remote_code=trust_remote_code,
    )
    report, written = run_locate_command(request, plot=locate_plot)
    if not is_main_process():
        return  # under a launcher the main process speaks for all
    console.print(locate_table(report, console.width))
    if report.get("routing"):
        console.print(routing_table(report))
    if report["mask_rates"]:
        console.print(mask_rates_table(report))
    elif request.mask_rates:
        err_console.print("No ME layer found: --mask-rate was not measured.")
    console.print(report["verdict"])
    for path in written:
        err_console.print(f"Wrote {path}")


def register(app: typer.Typer) -> None:
    from wemask_cli.cli.launch import launchable

    app.command()(launchable(locate))  # under a launcher: every process measures its share of the batches
