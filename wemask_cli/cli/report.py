"""`wemask report`: flags; merging and rendering in `wemask_cli.commands.report`."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from wemask_cli.cli.options import ReplaceOpt


def report(
    dirs: Annotated[list[Path], typer.Argument(help="Run directories with metrics.json (their sub-directories are searched too).")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the merged rows as JSON.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write the merged rows as CSV.")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="PNG path (default, when neither --json nor --csv is given: report/report.png beside the first run directory)."),
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Skip the PNG.")] = False,
    overwrite: ReplaceOpt = False,
):
    """Merge the metrics.json of any number of runs (eval, sft, dpo, grpo) into tables and one plot by mask rate.

    Runs are compared like with like: runs that differ in seed alone are averaged (± std across them); any other
    difference (stage, mode, LoRA/full, --ref-mask, remedies, quantization, model, data, training arguments) is its
    own line, named by what differs. A run without a mask is 'plain', the r = 0 point of its line. A directory
    without metrics.json is skipped with one line.
    """
    from wemask_cli.commands.report import gather, plan_report, write_rows
    from wemask_cli.commands.report_output import record_default_output
    from wemask_cli.render.common import console, err_console
    from wemask_cli.render.report import report_png, report_tables

    directories, plot, claim = plan_report(dirs, json_out, csv_out, plot, no_plot, overwrite)
    with claim or nullcontext():
        rows = gather(directories)
        for table in report_tables(rows, console.width):
            console.print(table)
        written = write_rows(rows, json_out, csv_out)
        if plot:
            written.append(report_png(rows, plot))
        if claim:
            record_default_output(claim, directories)
    if written:
        err_console.print(f"Wrote {', '.join(str(p) for p in written)}")


def register(app: typer.Typer) -> None:
    app.command()(report)
