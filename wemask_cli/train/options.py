"""wemask's own training options: their types, defaults, and the checks that need no model.

TRL's `ModelConfig` holds the LoRA and quantization fields, but not wemask's (mask, data, output safety), and
its `TrlParser` knows no provenance; so the options are one dataclass here, every TRL *training* field passes
through to the stage's TRL config class (see resolve.py), and LoRA is built by TRL's `get_peft_config` from a
`ModelConfig` (see install.py). Quantized loading is `models.load_model`'s, shared with infer and eval, rather than
TRL's `get_quantization_config` (which needs a ModelConfig those commands do not have).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import WeMaskError

MODES = ("aware", "free")


def option(default: Any = None, kind: type | tuple = str) -> Any:
    """A training option: None means 'not given on the command line'; `default` applies below recipe and flags;
    `kind` is the type(s) a recipe value must have."""
    return field(default=None, metadata={"default": default, "kind": kind})


NUMBER = (int, float)


@dataclass
class TrainOptions:
    """wemask's own training options. None means 'not given on the command line' (then recipe, then default)."""

    model: str | None = option()
    output_dir: str | None = option()
    config: str | None = None  # recipe YAML (command line only)
    dataset: str | None = option()
    dataset_split: str | None = option("train")
    dataset_config: str | None = option()
    dataset_columns: str | None = option()  # ours=theirs renames, e.g. prompt=question,completion=answer
    eval_dataset: str | None = option()
    eval_split: str | None = option("train")
    mask_rate: float | str | None = option(kind=(*NUMBER, str))  # None: the model's saved config, else no mask
    mode: str | None = option("aware")
    me_layer: int | str | None = option(kind=(int, str))
    select: str | None = option()  # None: WeMaskConfig's defaults (weight, from-me, 1.0), or the saved config
    layers: str | None = option()
    strength: float | None = option(kind=NUMBER)
    tokens: str | None = option()  # first | massive (None: the default, or the saved config)
    use_peft: bool | None = option(False, bool)
    lora_r: int | None = option(16, int)
    lora_alpha: int | None = option(32, NUMBER)
    lora_dropout: float | None = option(0.05, NUMBER)
    lora_target_modules: str | None = option(kind=(str, list))
    lora_modules_to_save: str | None = option(kind=(str, list))  # TRL ModelConfig's names from here on
    lora_task_type: str | None = option("CAUSAL_LM")
    use_dora: bool | None = option(False, bool)
    use_rslora: bool | None = option(False, bool)
    model_revision: str | None = option()
    attn_implementation: str | None = option()
    trust_remote_code: bool | None = option(False, bool)
    bnb_4bit_quant_type: str | None = option("nf4")
    use_bnb_nested_quant: bool | None = option(True, bool)
    load_in_4bit: bool | None = option(False, bool)
    load_in_8bit: bool | None = option(False, bool)
    dtype: str | None = option("auto")
    overwrite: bool | None = option(False, bool)
    resume: bool | None = option(False, bool)
    stage_options: dict = field(default_factory=dict)  # a stage's own flags (e.g. dpo's ref_mask), None = not given
    intervention_options: dict = field(default_factory=dict)  # remedies' flags (interventions registry), None = not given


OPTION_FIELDS = [f for f in dataclasses.fields(TrainOptions) if "default" in f.metadata]
DEFAULTS: dict[str, Any] = {f.name: f.metadata["default"] for f in OPTION_FIELDS}
KINDS: dict[str, Any] = {f.name: f.metadata["kind"] for f in OPTION_FIELDS}
CLI_ONLY = ("config", "overwrite", "resume")  # keys that make sense only on the command line, never in a recipe


def given_options(options: TrainOptions) -> dict:
    """The options given on the command line (stage and intervention flags included), None ones left out."""
    given = {f.name: getattr(options, f.name) for f in OPTION_FIELDS if getattr(options, f.name) is not None}
    for extra in (options.stage_options, options.intervention_options):
        given.update({k: v for k, v in extra.items() if v is not None})
    return given


def check_options(opts: dict, stage_name: str, mask) -> None:
    """Checks that need no model: fail before anything slow happens. `mask` is the parsed masking request."""
    if opts["mode"] not in MODES:
        raise WeMaskError(f"--mode {opts['mode']!r} is not valid: use aware (mask in training and inference) or free (inference only)")
    if mask.rates is not None and len(mask.rates) != 1:
        raise WeMaskError(f"wemask {stage_name} trains one mask rate at a time: give a single --mask-rate (got {opts['mask_rate']})")
    if opts["use_peft"]:
        check_lora_numbers(opts)
    if opts["load_in_4bit"] and opts["load_in_8bit"]:
        raise WeMaskError("--load-in-4bit and --load-in-8bit exclude each other: choose one")
    if (opts["load_in_4bit"] or opts["load_in_8bit"]) and not opts["use_peft"]:
        raise WeMaskError("quantized (4/8-bit) weights cannot be fully fine-tuned: add --use-peft to train LoRA adapters on them")
    if opts["load_in_4bit"] or opts["load_in_8bit"]:
        from ..models import quantization_config

        quantization_config("4bit" if opts["load_in_4bit"] else "8bit", opts["bnb_4bit_quant_type"])  # now, not after loading
    if opts["overwrite"] and opts["resume"]:
        raise WeMaskError("--overwrite and --resume exclude each other: --resume continues the run, --overwrite deletes it")
    if not opts.get("dataset"):
        raise WeMaskError(f"wemask {stage_name}: give --dataset (a local .jsonl/.json/.parquet/.csv file or a hub name)")


def check_lora_numbers(opts: dict) -> None:
    """LoRA's rank, alpha and dropout: PEFT's own errors for these come late and as tracebacks."""
    if int(opts["lora_r"]) < 1:
        raise WeMaskError(f"--lora-r {opts['lora_r']} is not valid: the LoRA rank must be an integer >= 1 (e.g. 8 or 16)")
    if float(opts["lora_alpha"]) <= 0:
        raise WeMaskError(f"--lora-alpha {opts['lora_alpha']} is not valid: use a number > 0 (e.g. twice --lora-r)")
    if not 0.0 <= float(opts["lora_dropout"]) < 1.0:
        raise WeMaskError(f"--lora-dropout {opts['lora_dropout']} is not valid: use a probability in [0, 1)")
