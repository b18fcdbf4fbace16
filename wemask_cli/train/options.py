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

from wemask_cli.runtime.errors import WeMaskError

MODES = ("aware", "free")
TRL_PANEL = "TRL ModelConfig options"
SHARED_HELP = None  # a mask flag that infer and eval share: its help is cli/options.py's


def option(
    default: Any = None,
    kind: type | tuple = str,
    help: str | None = SHARED_HELP,
    *,
    flags: tuple[str, ...] = (),
    negatable: bool = False,
    panel: str | None = None,
    cli_only: bool = False,
) -> Any:
    """A training option, declared once: None means 'not given on the command line'; `default` applies below recipe
    and flags; `kind` is the type(s) a recipe value must have. The rest is its flag (cli/train.py builds it):
    `help` ('{default}' is replaced by the default), `flags` more names than --the-name (TRL's aliases are added from
    trl_vocabulary), `negatable` a bool with a --no- form, `panel` its --help panel, `cli_only` never in a recipe."""
    return field(default=None, metadata={"default": default, "kind": kind, **flag_metadata(help, flags, negatable, panel, cli_only)})


def flag_metadata(help, flags=(), negatable=False, panel=None, cli_only=False) -> dict:
    """The {"flag": ...} metadata of a field that is a command-line flag (see `option`)."""
    return {"flag": {"help": help, "names": flags, "negatable": negatable, "panel": panel, "cli_only": cli_only}}


NUMBER = (int, float)
MODEL_HELP = "Hub id, local model directory, .gguf file, or omit for the embedded SmolLM2-135M-Instruct."


@dataclass
class TrainOptions:
    """wemask's own training options. None means 'not given on the command line' (then recipe, then default)."""

    model: str | None = option(help=MODEL_HELP, flags=("-m",))
    output_dir: str | None = option(help="Where checkpoints and the trained model go (default trainer_output, as in TRL).", flags=("-o",))
    config: str | None = field(default=None, metadata=flag_metadata(  # recipe YAML (command line only)
        "Recipe YAML: wemask and TRL keys (flags override it).", ("-c",), cli_only=True))  # fmt: skip
    dataset: str | None = option(help="Local .jsonl/.json/.parquet/.csv file or a hub dataset name.")
    dataset_split: str | None = option("train", help="Split to train on (default {default}; 'train[:1000]' slices).")
    dataset_config: str | None = option(help="Hub dataset configuration name (e.g. main for gsm8k).")
    dataset_columns: str | None = option(help="Rename columns, ours=theirs: prompt=question,completion=answer.")
    eval_dataset: str | None = option(help="Evaluation data (same formats); eval loss goes to metrics.json.")
    eval_split: str | None = option(
        "train", help="Split of --eval-dataset (default {default}); without --eval-dataset, that split of --dataset, as TRL's scripts do."
    )
    mask_rate: float | str | None = option(  # None: the model's saved config, else no mask
        kind=(*NUMBER, str), flags=("-r",),
        help="Share r in [0, 1] of dims masked. Default: the wemask_config.json the model carries (its mode kept unless --mode), else none (plain TRL).",
    )  # fmt: skip
    mode: str | None = option("aware", help="aware: mask in every training forward and at inference | free: train plain, mask at inference.")
    me_layer: int | str | None = option(kind=(int, str))
    select: str | None = option()  # None: WeMaskConfig's defaults (weight, from-me, 1.0), or the saved config
    layers: str | None = option()
    strength: float | None = option(kind=NUMBER)
    tokens: str | None = option()  # first | massive (None: the default, or the saved config)
    log_diagnostics: bool | None = option(
        False, bool, "At every logging step, log the first token's norm at the ME layer, the sink mass after it and the effective "
        "rank, measured on four locate prompts (wemask/... keys: TRL's logs, --report-to, metrics.json).", negatable=True,
    )  # fmt: skip
    use_peft: bool | None = option(False, bool, "Train LoRA adapters instead of all weights.", negatable=True)
    lora_r: int | None = option(16, int, "LoRA rank (default {default}).")
    lora_alpha: int | None = option(32, NUMBER, "LoRA alpha (default {default}).")
    lora_dropout: float | None = option(0.05, NUMBER, "LoRA dropout (default {default}).")
    lora_target_modules: str | None = option(
        kind=(str, list), help="Comma list of module names, or all-linear (default: PEFT's per-model choice)."
    )
    # TRL ModelConfig's fields that wemask passes to PEFT, from_pretrained and bitsandbytes, under TRL's names
    lora_modules_to_save: str | None = option(
        kind=(str, list), help="Comma (or space) list of modules trained in full and saved with the adapter.", panel=TRL_PANEL
    )
    lora_task_type: str | None = option("CAUSAL_LM", help="PEFT task type (default {default}).", panel=TRL_PANEL)
    use_dora: bool | None = option(False, bool, "DoRA: weight-decomposed LoRA.", negatable=True, panel=TRL_PANEL)
    use_rslora: bool | None = option(False, bool, "Rank-stabilised LoRA scaling (alpha/sqrt(r)).", negatable=True, panel=TRL_PANEL)
    model_revision: str | None = option(help="Hub revision (branch, tag or commit) of --model.", panel=TRL_PANEL)
    attn_implementation: str | None = option(
        help="eager | sdpa | flash_attention_2 | ... (default: transformers' choice).", panel=TRL_PANEL
    )
    trust_remote_code: bool | None = option(
        False, bool, "Run the model repository's own Python code (default {default}; a warning when on).", negatable=True, panel=TRL_PANEL
    )
    bnb_4bit_quant_type: str | None = option("nf4", help="nf4 | fp4, with --load-in-4bit (default {default}).", panel=TRL_PANEL)
    use_bnb_nested_quant: bool | None = option(
        True, bool, "Double quantization of the 4-bit scales (default {default}).", negatable=True, panel=TRL_PANEL
    )
    load_in_4bit: bool | None = option(False, bool, "Load weights 4-bit NF4 (bitsandbytes: CUDA, or CPU from 0.49; needs --use-peft).")
    load_in_8bit: bool | None = option(False, bool, "Load weights 8-bit (bitsandbytes: CUDA, or CPU from 0.49; needs --use-peft).")
    dtype: str | None = option("auto", help="auto | float32 | bfloat16 | float16 (auto: float32 on CPU).")
    overwrite: bool | None = option(
        False, bool, "Replace an earlier wemask run in --output-dir (only the files wemask wrote; refused while others are there).", cli_only=True
    )
    resume: bool | None = option(False, bool, "Continue from the newest complete checkpoint in --output-dir.", cli_only=True)
    datasets: list | None = field(default=None, metadata={"default": None, "kind": list})  # recipe only: TRL's mixture
    test_split_size: float | None = field(default=None, metadata={"default": None, "kind": NUMBER})  # (data/mixture.py)
    stage_options: dict = field(default_factory=dict)  # a stage's own flags (e.g. dpo's ref_mask), None = not given
    intervention_options: dict = field(default_factory=dict)  # remedies' flags (interventions registry), None = not given


OPTION_FIELDS = [f for f in dataclasses.fields(TrainOptions) if "default" in f.metadata]
FLAG_FIELDS = [f for f in dataclasses.fields(TrainOptions) if "flag" in f.metadata]  # every command-line flag
DEFAULTS: dict[str, Any] = {f.name: f.metadata["default"] for f in OPTION_FIELDS}
KINDS: dict[str, Any] = {f.name: f.metadata["kind"] for f in OPTION_FIELDS}
CLI_ONLY = tuple(f.name for f in FLAG_FIELDS if f.metadata["flag"]["cli_only"])  # never in a recipe
RECIPE_ONLY = tuple(f.name for f in OPTION_FIELDS if "flag" not in f.metadata)  # no flag: TRL's `datasets:` mixture


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
        from wemask_cli.models.quantization import quantization_config

        quantization_config("4bit" if opts["load_in_4bit"] else "8bit", opts["bnb_4bit_quant_type"])  # now, not after loading
    if opts["overwrite"] and opts["resume"]:
        raise WeMaskError("--overwrite and --resume exclude each other: --resume continues the run, --overwrite deletes it")
    if not opts.get("dataset") and not opts.get("datasets"):
        raise WeMaskError(
            f"wemask {stage_name}: give --dataset (a local .jsonl/.json/.parquet/.csv file or a hub name), or a `datasets:` "
            "mixture in the --config recipe"
        )
    if opts.get("test_split_size") is not None and not opts.get("datasets"):
        raise WeMaskError("test_split_size splits a `datasets:` mixture: add the mixture, or give --eval-dataset")


def check_lora_numbers(opts: dict) -> None:
    """LoRA's rank, alpha and dropout: PEFT's own errors for these come late and as tracebacks."""
    if int(opts["lora_r"]) < 1:
        raise WeMaskError(f"--lora-r {opts['lora_r']} is not valid: the LoRA rank must be an integer >= 1 (e.g. 8 or 16)")
    if float(opts["lora_alpha"]) <= 0:
        raise WeMaskError(f"--lora-alpha {opts['lora_alpha']} is not valid: use a number > 0 (e.g. twice --lora-r)")
    if not 0.0 <= float(opts["lora_dropout"]) < 1.0:
        raise WeMaskError(f"--lora-dropout {opts['lora_dropout']} is not valid: use a probability in [0, 1)")
