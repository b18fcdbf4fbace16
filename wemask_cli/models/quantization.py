"""bitsandbytes 4-bit and 8-bit loading, and the quantization a training run recorded for its base model
(`--base-quantization recorded|none|4bit|8bit`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from wemask_cli.outputs import RUN_RECORD_FILE
from wemask_cli.runtime import progress
from wemask_cli.runtime.errors import WeMaskError

BNB_CPU_SINCE = "0.49"  # the first bitsandbytes with a CPU back-end for 4-bit and 8-bit
RECORDED = "recorded"  # load_model(quantization=RECORDED): the base quantized as the training run recorded it
BASE_QUANTIZATIONS = (RECORDED, "none", "4bit", "8bit")  # what --base-quantization accepts


def quantization_config(quantization: str | None, quant_type: str = "nf4", nested: bool = True):
    """A bitsandbytes config for '4bit' (`quant_type` nf4 or fp4, `nested`: double quantization) / '8bit', or None;
    refused only where bitsandbytes cannot run."""
    if quantization is None:
        return None
    if quantization not in ("4bit", "8bit"):
        raise WeMaskError(f"quantization {quantization!r} is not valid: use 4bit or 8bit")
    require_bitsandbytes(quantization)
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if torch.cuda.is_available() else torch.float32  # bf16 matmuls are slow on the CPU
    if quant_type not in ("nf4", "fp4"):
        raise WeMaskError(f"--bnb-4bit-quant-type {quant_type!r} is not valid: use nf4 or fp4")
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=nested
    )


def require_bitsandbytes(quantization: str) -> None:
    """bitsandbytes runs on CUDA, and on the CPU from 0.49 on: anything else is one line saying why."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        found = version("bitsandbytes")
    except PackageNotFoundError:
        raise WeMaskError(f"--load-in-{quantization} needs bitsandbytes: pip install 'bitsandbytes>=0.49'") from None
    if not torch.cuda.is_available() and Version(found) < Version(BNB_CPU_SINCE):
        raise WeMaskError(
            f"--load-in-{quantization}: bitsandbytes {found} runs only on CUDA and no GPU is visible here; its CPU "
            f"back-end needs bitsandbytes >= {BNB_CPU_SINCE} (pip install -U bitsandbytes), or drop the flag"
        )


def quantized_device_map() -> dict:
    """Where bitsandbytes puts the whole model: this process's GPU, else the CPU."""
    return {"": torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}


def recorded_quantization(source: str) -> tuple[str | None, dict]:
    """(4bit | 8bit | None, its bitsandbytes settings as load_model's `pretrained`): how the training run saved in
    `source` loaded its base (its wemask_run.json options); (None, {}) for anything else."""
    try:
        options = json.loads((Path(source) / RUN_RECORD_FILE).read_text()).get("options") or {}
    except (OSError, ValueError, AttributeError):  # no record (a plain model, a hub id) or not a run's
        return None, {}
    if options.get("load_in_8bit"):
        return "8bit", {}
    if not options.get("load_in_4bit"):
        return None, {}
    return "4bit", {"quant_type": options.get("bnb_4bit_quant_type"), "nested": options.get("use_bnb_nested_quant")}


def base_quantization(source: str, asked: str | None, pretrained: dict | None) -> tuple[str | None, dict | None]:
    """(quantization, pretrained) for load_model: `asked` as given, 'none' as None, RECORDED as the run in `source`
    recorded it, said in one line that names the flag to change it."""
    if asked not in BASE_QUANTIZATIONS and asked is not None:
        raise WeMaskError(f"--base-quantization {asked!r} is not valid: use {', '.join(BASE_QUANTIZATIONS)}")
    if asked != RECORDED:
        return (None if asked == "none" else asked), pretrained
    quantization, settings = recorded_quantization(source)
    if quantization is None:
        return None, pretrained
    article = {"4bit": "a 4-bit", "8bit": "an 8-bit"}[quantization]
    try:
        require_bitsandbytes(quantization)
    except WeMaskError as err:
        raise WeMaskError(f"{source} trained on {article} base ({err}); or pass --base-quantization none to load the base "
                          "unquantized (its outputs then differ from training's)") from None
    detail = f" ({settings['quant_type'] or 'nf4'}{', nested' if settings['nested'] is not False else ''})" if settings else ""
    progress.say(f"{source} trained on {article}{detail} base (wemask_run.json): loading the base so "
                 "(--base-quantization none loads it unquantized)")
    return quantization, {**settings, **(pretrained or {})}
