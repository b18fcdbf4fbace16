"""`wemask locate`: prompts in, ME-layer report out. What needs no model is checked first, before torch is imported
(the sizes, --plot's suffix, the output files, --model as models/preflight.py reads it, a hub --dataset offline, the
prompts); then the model loads and commands/locate_report.py measures it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli import resources
from wemask_cli.data import load_hub, load_local, looks_local
from wemask_cli.prompts.files import prompt_value, read_prompt_file
from wemask_cli.runtime.errors import WeMaskError

DEFAULT_PROMPTS = "locate_prompts.jsonl"  # bundled in wemask_cli.resources
DATASET_PROMPTS = 32  # --num-prompts default for --dataset


def read_dataset(spec: str, text_field: str, limit: int) -> list[str | list[dict]]:
    """The first `limit` rows' `text_field` of a local file or hub dataset."""
    if looks_local(spec):
        dataset, _ = load_local(Path(spec).expanduser(), None, "--dataset")
    else:
        dataset = load_hub(spec, None, None, "--dataset")
    if text_field not in dataset.column_names:
        raise WeMaskError(f"--dataset {spec} has no column {text_field!r} (it has {dataset.column_names}): set --text-field")
    values = dataset.select(range(min(limit, len(dataset))))[text_field]
    prompts = [prompt_value(v, f"--dataset {spec} row {i}") for i, v in enumerate(values) if v not in (None, "")]
    if not prompts:
        raise WeMaskError(f"--dataset {spec} has no non-empty {text_field!r} values in its first {limit} rows")
    return prompts


def load_prompts(
    prompts_file: Path | None, dataset: str | None, text_field: str, num_prompts: int | None
) -> list[str | list[dict]]:
    """Prompts from --prompts, --dataset, or the shipped default set; the first --num-prompts of them."""
    if prompts_file and dataset:
        raise WeMaskError("give prompts either with --prompts or with --dataset, not both")
    if num_prompts is not None and num_prompts < 1:
        raise WeMaskError(f"--num-prompts {num_prompts} is not valid: use 1 or more")
    if dataset:
        return read_dataset(dataset, text_field, num_prompts or DATASET_PROMPTS)
    if prompts_file is None:
        with resources.as_file(DEFAULT_PROMPTS) as path:
            return read_prompt_file(path, "--prompts")[:num_prompts]
    return read_prompt_file(prompts_file, "--prompts")[:num_prompts]


@dataclass
class LocateRequest:
    """Everything `wemask locate` was asked, parsed (`mask_rates`: the rates, already checked)."""

    model: str | None = None
    prompts: Path | None = None
    dataset: str | None = None
    text_field: str = "text"
    num_prompts: int | None = None
    max_length: int = 256
    batch_size: int = 8
    mask_rates: list[float] = field(default_factory=list)
    json_out: Path | None = None
    plot: Path | None = None
    dtype: str = "auto"
    base_quantization: str = "recorded"  # models.BASE_QUANTIZATIONS
    overwrite: bool = False
    trust_remote_code: bool = False


def check_request(request: LocateRequest) -> list:
    """What `wemask locate` refuses without a model, in one line before torch is imported: the sizes, --plot's
    suffix, --model (models/preflight.py), the output files (not an input, not a finished file without --overwrite,
    writable) and a hub --dataset with the hub offline. Returns the prompts (read with the standard library, or
    from --dataset)."""
    from wemask_cli.data.preflight import check_hub_dataset
    from wemask_cli.models.preflight import check_model
    from wemask_cli.models.sources import model_inputs
    from wemask_cli.outputs import check_output_file

    for flag, size in (("--batch-size", request.batch_size), ("--max-length", request.max_length)):
        if size < 1:
            raise WeMaskError(f"{flag} {size} is not valid: use 1 or more")
    if request.plot is not None and request.plot.suffix.lower() != ".png":
        raise WeMaskError(f"--plot {request.plot}: the plot is a PNG, give a file name ending in .png")
    inputs = [*model_inputs(request.model), ("--prompts", request.prompts), ("--dataset", request.dataset)]
    for path, flag in ((request.json_out, "--json"), (request.plot, "--plot")):
        if path is not None:
            check_output_file(path, overwrite=request.overwrite, flag=flag, inputs=inputs)
    check_model(request.model)
    if request.dataset and not request.prompts and not looks_local(request.dataset):
        check_hub_dataset(request.dataset, "--dataset")
    return load_prompts(request.prompts, request.dataset, request.text_field, request.num_prompts)


def locate(request: LocateRequest, plot: Callable[[dict, Path], Path] | None = None) -> tuple[dict, list[Path]]:
    """The whole command: `check_request` first, then the model loaded, the report measured (locate_report.py),
    --json written and --plot drawn by `plot` (the CLI's renderer). Returns (the report, the files written)."""
    texts = check_request(request)
    from wemask_cli.commands.locate_report import run_locate
    from wemask_cli.models.loading import load_model
    from wemask_cli.outputs import atomic_write_json
    from wemask_cli.runtime.progress import status, task

    with status("Loading model..."):
        loaded = load_model(request.model, dtype=request.dtype, quantization=request.base_quantization,
                            pretrained={"trust_remote_code": request.trust_remote_code})
    with task("Measuring layers (prompts)", len(texts) * (1 + len(request.mask_rates))) as advance:
        report = run_locate(loaded, texts, max_length=request.max_length, batch_size=request.batch_size,
                            mask_rates=request.mask_rates, progress=advance)
    written = [atomic_write_json(request.json_out, report)] if request.json_out else []
    if request.plot and plot is not None:
        written.append(plot(report, request.plot))
    return report, written
