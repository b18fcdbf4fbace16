"""`wemask locate`: prompts in, ME-layer report out. What needs no model is checked first, before torch is imported
(prompts/sets.py's MeasuringRequest.check: the sizes, --plot's suffix, the output files, --model as
models/preflight.py reads it, a hub --dataset offline, the prompts); then the model loads and
commands/locate_report.py measures it. Under a launcher every process measures its share of the prompts and holds
the whole report; the main process writes --json and --plot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wemask_cli.prompts.sets import MeasuringRequest


class LocateRequest(MeasuringRequest):
    """Everything `wemask locate` was asked, parsed (`mask_rates`: the rates, already checked)."""


def locate(request: LocateRequest, plot: Callable[[dict, Path], Path] | None = None) -> tuple[dict, list[Path]]:
    """The whole command: the request checked first, then the model loaded, the report measured (locate_report.py),
    --json written and --plot drawn by `plot` (the CLI's renderer). Returns (the report, the files written)."""
    texts = request.check()
    from wemask_cli.commands.locate_report import run_locate
    from wemask_cli.models.loading import load_model
    from wemask_cli.outputs import atomic_write_json
    from wemask_cli.runtime import ranks
    from wemask_cli.runtime.progress import status, task

    ranks.join_group()  # under a launcher: every process measures its share of the batches (locate_report.shares)
    with status("Loading model..."):
        loaded = load_model(request.model, dtype=request.dtype, quantization=request.base_quantization,
                            pretrained={"trust_remote_code": request.trust_remote_code})
    with task("Measuring layers (prompts)", len(texts) * (1 + len(request.mask_rates))) as advance:
        report = run_locate(loaded, texts, max_length=request.max_length, batch_size=request.batch_size,
                            mask_rates=request.mask_rates, progress=advance)
    if not ranks.is_main_process():
        return report, []
    written = [atomic_write_json(request.json_out, report)] if request.json_out else []
    if request.plot and plot is not None:
        written.append(plot(report, request.plot))
    return report, written
