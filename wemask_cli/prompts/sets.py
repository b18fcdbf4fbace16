"""The prompts a measuring command reads (locate, probe): --prompts, --dataset, or the bundled set; and the flags
such a command shares (`MeasuringRequest`)."""

from __future__ import annotations

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
class MeasuringRequest:
    """What every measuring command (locate, probe) is asked: the model, the prompts, the batches, the mask rates
    (already checked), the output files and how to load the model."""

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

    def check_outputs(self) -> None:
        """--plot names a PNG; --json and --plot replace nothing without --overwrite, and no input of the command."""
        from wemask_cli.models.sources import model_inputs
        from wemask_cli.outputs import check_output_file

        if self.plot is not None and self.plot.suffix.lower() != ".png":
            raise WeMaskError(f"--plot {self.plot}: the plot is a PNG, give a file name ending in .png")
        inputs = [*model_inputs(self.model), ("--prompts", self.prompts), ("--dataset", self.dataset)]
        for path, flag in ((self.json_out, "--json"), (self.plot, "--plot")):
            if path is not None:
                check_output_file(path, overwrite=self.overwrite, flag=flag, inputs=inputs)

    def texts(self) -> list[str | list[dict]]:
        """The prompts asked for (load_prompts)."""
        return load_prompts(self.prompts, self.dataset, self.text_field, self.num_prompts)

    def check(self) -> list[str | list[dict]]:
        """What needs no model, in one line before torch is imported: the sizes, the outputs (check_outputs),
        --model as models/preflight.py reads it and a hub --dataset with the hub offline. Returns the prompts."""
        from wemask_cli.data.preflight import check_hub_dataset
        from wemask_cli.models.preflight import check_model

        for flag, size in (("--batch-size", self.batch_size), ("--max-length", self.max_length)):
            if size < 1:
                raise WeMaskError(f"{flag} {size} is not valid: use 1 or more")
        self.check_outputs()
        check_model(self.model)
        if self.dataset and not self.prompts and not looks_local(self.dataset):
            check_hub_dataset(self.dataset, "--dataset")
        return self.texts()
