"""The one training path shared by `wemask sft`, `wemask dpo` and `wemask grpo`.

    run(stage, options, extra_args) -> RunResult

1. resolve the configuration: defaults < --config recipe.yaml < command-line flags. wemask's own options
   live in `TrainOptions`; every other flag is parsed by transformers' HfArgumentParser into the stage's TRL
   config class (SFTConfig, DPOConfig, GRPOConfig), so no TRL option is re-declared or hidden;
2. check the output directory (refused when non-empty unless --overwrite or --resume);
3. load the data (wemask_cli.data), then the model (wemask_cli.models.load_model), build the LoRA config;
4. `stage.build_trainer(ctx)` builds the TRL trainer (TRL wraps the model with PEFT when asked);
5. install WeMask on the model the trainer trains (`trainer.model`, the PeftModel under LoRA): mode aware puts
   the hook in every training forward, dims chosen once from the starting weights; mode free leaves training
   untouched and only records the config (dims from the weights saved) so inference applies it;
6. train (resuming from the last checkpoint with --resume; SIGINT/SIGTERM save a checkpoint and stop),
   then save: every checkpoint and the output dir get wemask_config.json and wemask_run.json; the output dir
   also gets metrics.json (see `write_metrics`).

A stage plugs in with a `Stage` (see sft.py): its TRL config class, its data format family and a
`build_trainer(ctx)`; DPO/GRPO can override `install_mask` (reference models, generation) and add
`check` (early validation before any model loads), `trl_defaults`, `option_defaults` (their own wemask
flags, also settable in a recipe) and `extra_metrics`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import WeMaskError
from ..method.config import CONFIG_NAME, WeMaskConfig

RUN_NAME = "wemask_run.json"
METRICS_NAME = "metrics.json"
MODES = ("aware", "free")


# ---------------------------------------------------------------------------------------------------------------
# Options and stages


def option(default: Any = None) -> Any:
    """A training option: None means 'not given on the command line'; `default` applies below recipe and flags."""
    return field(default=None, metadata={"default": default})


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
    mask_rate: float | str | None = option()  # None: the model's saved wemask_config.json, else no mask (plain TRL)
    mode: str | None = option("aware")
    me_layer: int | str | None = option()
    select: str | None = option()  # None: WeMaskConfig's defaults (weight, from-me, 1.0), or the saved config
    layers: str | None = option()
    strength: float | None = option()
    use_peft: bool | None = option(False)
    lora_r: int | None = option(16)
    lora_alpha: int | None = option(32)
    lora_dropout: float | None = option(0.05)
    lora_target_modules: str | None = option()
    load_in_4bit: bool | None = option(False)
    load_in_8bit: bool | None = option(False)
    dtype: str | None = option("auto")
    overwrite: bool | None = option(False)
    resume: bool | None = option(False)
    stage_options: dict = field(default_factory=dict)  # a stage's own flags (e.g. dpo's ref_mask), None = not given


DEFAULTS: dict[str, Any] = {f.name: f.metadata["default"] for f in dataclasses.fields(TrainOptions) if "default" in f.metadata}
# Keys that make sense only on the command line, never in a recipe.
CLI_ONLY = ("config", "overwrite", "resume")


@dataclass
class TrainContext:
    """Everything a stage needs to build its trainer; `callbacks` must be passed to the trainer."""

    stage: "Stage"
    options: dict  # resolved wemask options (TrainOptions fields + the stage's own)
    args: Any  # the TRL config (SFTConfig, DPOConfig, GRPOConfig)
    loaded: Any  # models.LoadedModel
    train_dataset: Any
    eval_dataset: Any
    data_format: Any  # data.DataFormat
    peft_config: Any  # peft.LoraConfig or None
    wemask: WeMaskConfig  # requested config (dims not chosen yet, unless resumed)
    callbacks: list = field(default_factory=list)

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer


@dataclass
class Stage:
    """How one training command plugs into the shared path."""

    name: str  # "sft", "dpo", "grpo": also the data format family in wemask_cli.data.FORMATS
    config_class: type  # the TRL config class whose fields pass through (SFTConfig, ...)
    build_trainer: Callable[[TrainContext], Any]
    install_mask: Callable[[Any, WeMaskConfig, TrainContext], WeMaskConfig] | None = None  # default: install_on_model
    check: Callable[[dict, Any], None] | None = None  # (options, trl args): fail fast before data/model load
    trl_defaults: dict = field(default_factory=dict)  # stage defaults for TRL fields (below recipe and flags)
    option_defaults: dict = field(default_factory=dict)  # the stage's own wemask options and their defaults
    extra_metrics: Callable[[Any], dict] | None = None  # trainer -> more keys for metrics.json


@dataclass
class RunResult:
    output_dir: Path
    interrupted: bool
    checkpoint: str | None  # the checkpoint saved on interruption
    metrics: dict | None
    wemask: WeMaskConfig | None
    trainer: Any = None


# ---------------------------------------------------------------------------------------------------------------
# Configuration: defaults < recipe < command line


class _ArgError(Exception):
    pass


def _trl_parser(config_class):
    """HfArgumentParser for the TRL config class; errors raise instead of exiting (we print one line)."""
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message):  # argparse would print usage and exit 2 itself
            raise _ArgError(message)

    return Parser(config_class, allow_abbrev=False)


def _explicit_trl_args(parser, extra_args: list[str], stage_name: str) -> dict:
    """Only the TRL options actually given in extra_args, typed by argparse (both --a-b and --a_b spellings)."""
    explicit = argparse.Namespace()
    saved = [(action, action.default, action.required, action.type) for action in parser._actions]
    try:
        for action in parser._actions:
            action.default, action.required = argparse.SUPPRESS, False
            if action.type in (int, float):  # '--max-length None' sets an optional number to None
                action.type = _none_or(action.type)
        try:
            namespace, unknown = parser.parse_known_args(list(extra_args), namespace=explicit)
        except _ArgError as err:
            raise WeMaskError(f"wemask {stage_name}: {err}") from None
    finally:
        for action, default, required, type_ in saved:
            action.default, action.required, action.type = default, required, type_
    namespace = vars(namespace)
    namespace.pop("help", None)
    if unknown:
        names = [a for a in unknown if a.startswith("-")] or unknown
        hint = ""
        wemask_like = [n for n in names if n.lstrip("-").replace("-", "_").split("=")[0] in DEFAULTS]
        if wemask_like:
            hint = " (wemask's own flags use hyphens: " + ", ".join("--" + n.lstrip("-").replace("_", "-").split("=")[0] for n in wemask_like) + ")"
        raise WeMaskError(
            f"wemask {stage_name}: unknown option(s) {' '.join(names)}: not a wemask flag nor a field of TRL's "
            f"{parser.dataclass_types[0].__name__}{hint}; see `wemask {stage_name} --help` and `--help-trl`"
        )
    return namespace


def _none_or(convert):
    def parse(text: str):
        return None if text.strip().lower() in ("none", "null") else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error messages
    return parse


def _coerce(parser, key: str, value):
    """A recipe value converted like the command line would (YAML reads 2e-5 as a string)."""
    for action in parser._actions:
        if action.dest == key and action.type is not None and not isinstance(action, argparse._StoreFalseAction):
            convert = action.type
            try:
                if isinstance(value, list):
                    return [convert(v) if isinstance(v, str) else v for v in value]
                if isinstance(value, str):
                    return convert(value)
            except (TypeError, ValueError):
                raise WeMaskError(f"recipe key {key!r}: {value!r} is not a valid value") from None
    return value


def read_recipe(path: str | None) -> dict:
    """A recipe YAML as a flat dict with keys normalised to underscores."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).expanduser().read_text())
    except FileNotFoundError:
        raise WeMaskError(f"--config {path}: no such recipe file") from None
    except yaml.YAMLError as err:
        raise WeMaskError(f"--config {path} is not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise WeMaskError(f"--config {path} must be a mapping of option: value, not a {type(data).__name__}")
    return {str(key).replace("-", "_"): value for key, value in data.items()}


def recipe_path(value: str, recipe: str) -> str:
    """A relative path in a recipe: from the current directory, else from the recipe's folder or the one above."""
    path = Path(value).expanduser()
    if path.is_absolute() or path.exists():
        return value
    folder = Path(recipe).expanduser().resolve().parent
    for base in (folder, folder.parent):
        if (base / path).exists():
            return str(base / path)
    return value


def hardware_defaults(config_class) -> dict:
    """TRL defaults to bf16 and gradient checkpointing; without CUDA, train in float32 on the CPU without them."""
    import torch

    if torch.cuda.is_available():
        return {}
    names = {f.name for f in dataclasses.fields(config_class)}
    # transformers 5.2x renamed gradient_checkpointing to activation_checkpointing (the old name warns)
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {"use_cpu": True, "bf16": False, "fp16": False, checkpointing: False}


def resolve(stage: Stage, options: TrainOptions, extra_args: list[str]) -> tuple[dict, Any, dict]:
    """(wemask options, TRL config, provenance) from defaults < recipe < command line."""
    parser = _trl_parser(stage.config_class)
    trl_fields = {f.name for f in dataclasses.fields(stage.config_class) if f.init}
    cli_trl = _explicit_trl_args(parser, extra_args, stage.name)
    recipe = read_recipe(options.config)
    ours = {**DEFAULTS, **stage.option_defaults}
    cli_ours = {k: v for k, v in dataclasses.asdict(options).items() if k != "stage_options" and v is not None}
    cli_ours.update({k: v for k, v in options.stage_options.items() if v is not None})
    unknown = sorted(set(recipe) - set(ours) - trl_fields)
    if unknown:
        raise WeMaskError(
            f"--config {options.config}: unknown key(s) {unknown}: neither wemask options ({', '.join(sorted(set(ours) - set(CLI_ONLY)))}) "
            f"nor fields of TRL's {stage.config_class.__name__}"
        )
    cli_only = sorted(set(recipe) & set(CLI_ONLY))
    if cli_only:
        raise WeMaskError(f"--config {options.config}: {cli_only} can only be given on the command line")
    resolved = dict(ours)
    source = {key: "default" for key in resolved}
    for key, value in recipe.items():
        if key in ours:
            resolved[key], source[key] = value, "recipe"
    for key in ("dataset", "eval_dataset", "model"):
        if source.get(key) == "recipe" and resolved[key]:
            resolved[key] = recipe_path(str(resolved[key]), options.config)
    for key, value in cli_ours.items():
        resolved[key], source[key] = value, "flag"
    # output_dir is both a wemask option and a TRL field: --output-dir > --output_dir (TRL spelling) > recipe
    if "output_dir" in cli_trl and options.output_dir is None:
        resolved["output_dir"], source["output_dir"] = cli_trl["output_dir"], "flag"
    if not resolved.get("output_dir"):
        raise WeMaskError(f"wemask {stage.name}: give --output-dir DIR (or output_dir in the --config recipe)")
    trl_values = {**hardware_defaults(stage.config_class), **stage.trl_defaults}
    trl_source = {key: "default" for key in trl_values}
    for key, value in recipe.items():
        if key in trl_fields and key not in ours:
            trl_values[key], trl_source[key] = _coerce(parser, key, value), "recipe"
    for key, value in cli_trl.items():
        trl_values[key], trl_source[key] = value, "flag"
    for old, new in (("gradient_checkpointing", "activation_checkpointing"), ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if trl_source.get(old) in ("recipe", "flag") and trl_source.get(new) == "default":
            del trl_values[new], trl_source[new]  # the user's spelling wins over our default
    trl_values["output_dir"] = str(resolved["output_dir"])
    try:
        (args,) = parser.parse_dict(trl_values)
    except (ValueError, TypeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise WeMaskError(f"wemask {stage.name}: invalid TRL setting for {stage.config_class.__name__}: {reason}") from None
    return resolved, args, {"wemask": source, "trl": trl_source}


def check_options(opts: dict, stage_name: str) -> None:
    """Checks that need no model: fail before anything slow happens."""
    from ..masking import parse_mask_rates, parse_me_layer, require_me_layer

    if opts["mode"] not in MODES:
        raise WeMaskError(f"--mode {opts['mode']!r} is not valid: use aware (mask in training and inference) or free (inference only)")
    rates = parse_mask_rates(None if opts["mask_rate"] is None else str(opts["mask_rate"]))
    if rates is not None and len(rates) != 1:
        raise WeMaskError(f"wemask {stage_name} trains one mask rate at a time: give a single --mask-rate (got {opts['mask_rate']})")
    parse_me_layer(None if opts["me_layer"] is None else str(opts["me_layer"]))
    if opts["load_in_4bit"] and opts["load_in_8bit"]:
        raise WeMaskError("--load-in-4bit and --load-in-8bit exclude each other: choose one")
    if (opts["load_in_4bit"] or opts["load_in_8bit"]) and not opts["use_peft"]:
        raise WeMaskError("quantized (4/8-bit) weights cannot be fully fine-tuned: add --use-peft to train LoRA adapters on them")
    if opts["load_in_4bit"] or opts["load_in_8bit"]:
        from ..models import quantization_config

        quantization_config("4bit" if opts["load_in_4bit"] else "8bit")  # no CUDA: a clear error now, not after loading
    if opts["overwrite"] and opts["resume"]:
        raise WeMaskError("--overwrite and --resume exclude each other: --resume continues the run, --overwrite deletes it")
    if not opts.get("dataset"):
        raise WeMaskError(f"wemask {stage_name}: give --dataset (a local .jsonl/.json/.parquet/.csv file or a hub name)")
    if rates:
        from ..method.config import find_saved_config

        model_dir = Path(str(opts["model"] or "")).expanduser()
        saved = find_saved_config(model_dir) if opts["model"] and model_dir.is_dir() else None
        require_me_layer(rates, opts["me_layer"], opts["layers"], saved)


# ---------------------------------------------------------------------------------------------------------------
# Output directory, checkpoints


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def say(message: str) -> None:
    """A progress line on stderr, from the main process only."""
    if is_main_process():
        print(f"wemask: {message}", file=sys.stderr, flush=True)


def last_checkpoint(directory: Path) -> str | None:
    """The newest checkpoint-N that was completely written (has trainer_state.json)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    found = []
    for child in directory.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
        step = child.name.rpartition("-")[2]
        if child.is_dir() and step.isdigit() and (child / "trainer_state.json").is_file():
            found.append((int(step), child))
    return str(max(found)[1]) if found else None


def looks_like_run(directory: Path) -> bool:
    return any((directory / name).exists() for name in (RUN_NAME, METRICS_NAME, "trainer_state.json")) or any(
        directory.glob("checkpoint-*")
    )


def prepare_output_dir(directory: Path, overwrite: bool, resume: bool, args) -> str | None:
    """Refuse a non-empty directory unless asked; return the checkpoint to resume from (or None)."""
    exists = directory.is_dir() and any(directory.iterdir())
    if directory.exists() and not directory.is_dir():
        raise WeMaskError(f"--output-dir {directory} is a file: choose a directory")
    checkpoint, delete = None, False
    if exists and resume:
        if (directory / METRICS_NAME).is_file():
            raise WeMaskError(
                f"--resume: {directory} holds a finished run ({METRICS_NAME}); to train further start a new run with "
                f"--model {directory}, or pass --overwrite to replace it"
            )
        checkpoint = last_checkpoint(directory)
        if checkpoint is None:
            raise WeMaskError(f"--resume: {directory} has no complete checkpoint-N to resume from; pass --overwrite to start over")
    elif exists and overwrite:
        if not looks_like_run(directory):
            raise WeMaskError(
                f"--overwrite: {directory} is not empty and does not look like a training run (no {RUN_NAME} or "
                "checkpoint-N): refusing to delete it; choose another --output-dir"
            )
        delete = True
    elif exists:
        ckpt = last_checkpoint(directory)
        state = "a finished run" if (directory / METRICS_NAME).is_file() else (
            f"an unfinished run (last checkpoint {Path(ckpt).name})" if ckpt else "files"
        )
        raise WeMaskError(
            f"--output-dir {directory} is not empty (it holds {state}): pass --resume to continue from its last "
            "checkpoint, --overwrite to replace it, or choose another --output-dir"
        )
    elif resume:
        say(f"--resume: nothing to resume in {directory}: starting a new run")
    _barrier(args)  # every process decided on the same, untouched directory
    if args.process_index == 0:
        if delete:
            say(f"--overwrite: deleting the previous run in {directory}")
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
    _barrier(args)
    return checkpoint


def _barrier(args) -> None:
    if args.world_size > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


# ---------------------------------------------------------------------------------------------------------------
# WeMask on the trained model


def requested_wemask(opts: dict, loaded, args, provenance: dict) -> WeMaskConfig:
    """The WeMaskConfig the flags ask for, mode recorded; dims chosen at install.

    Without --mask-rate: the model's saved config, keeping its saved mode unless --mode is given, else r=0.
    """
    from ..masking import MaskFlags, configs_from_flags

    flags = MaskFlags(
        mask_rate=None if opts["mask_rate"] is None else str(opts["mask_rate"]),
        me_layer=None if opts["me_layer"] is None else str(opts["me_layer"]),
        select=opts["select"],
        layers=opts["layers"],
        strength=opts["strength"],
        seed=args.seed if opts["mask_rate"] is not None else None,  # used by select=random
    )
    from transformers.integrations import is_deepspeed_zero3_enabled

    from ..method.arch import decoder_layers

    if flags.layer == "auto" and is_deepspeed_zero3_enabled():
        raise WeMaskError(
            "--me-layer auto cannot locate on ZeRO-3-partitioned weights: run `wemask locate --model M` once and pass --me-layer N"
        )
    with args.main_process_first(desc="locating the ME layer"):
        mode_given = opts["mask_rate"] is not None or provenance["wemask"]["mode"] != "default"
        (config,) = configs_from_flags(flags, loaded, mode=opts["mode"] if mode_given else None)
    config = config or WeMaskConfig(mode=opts["mode"])
    if config.active:  # a layer outside the model fails now, before the data is tokenized
        config.layer_indices(len(decoder_layers(loaded.model)))
    return config


def install_on_reference(trainer, config: WeMaskConfig):
    """Give a separate reference model (TRL's `ref_model`) the policy's mask with the same recorded dims.

    Returns the unwrapped reference model, or None when the trainer has none (LoRA: the adapter-disabled policy).
    """
    from ..method.mask import apply_wemask

    reference = getattr(trainer, "ref_model", None)
    if reference is None:
        return None
    reference = trainer.accelerator.unwrap_model(reference)
    with zero3_gather(reference):
        apply_wemask(reference, config)
    return reference


def zero3_gather(model):
    """Under DeepSpeed ZeRO-3 the norm weights are partitioned: gather them (a collective) to choose dims."""
    import contextlib

    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return contextlib.nullcontext()
    import deepspeed

    from ..method.arch import resolve_layers

    weights = [parts.attn_norm.weight for parts in resolve_layers(model)]
    return deepspeed.zero.GatheredParameters(weights, modifier_rank=None)


def install_on_model(trainer, config: WeMaskConfig, ctx: TrainContext) -> WeMaskConfig:
    """Default install: hook `trainer.model` (the module TRL trains, PeftModel included); returns dims used.

    aware: the hooks stay for training. free: the dims are chosen the same way and the hooks removed at once.
    """
    from ..method.mask import apply_wemask

    if not config.active:  # r = 0: nothing to install, and no need to gather sharded weights
        return config.with_updates(dims=None)
    with zero3_gather(trainer.model):
        handle = apply_wemask(trainer.model, config)
    if config.mode == "free":
        handle.remove()
    return handle.config


def free_mode_dims(model, config: WeMaskConfig) -> WeMaskConfig:
    """For free mode: the dims `wemask infer` would pick on the weights being saved (SPEC: a function of the
    weights at the moment the mask is applied). Falls back to the recorded dims when weights are sharded or the
    selection needs a forward pass (select=activation)."""
    from ..method.arch import base_model, resolve_layers
    from ..method.mask import apply_wemask

    if not config.active or config.select == "activation":
        return config
    weight = resolve_layers(model)[0].attn_norm.weight
    if weight.dim() != 1 or weight.numel() != getattr(base_model(model).config, "hidden_size", None):
        return config  # sharded (ZeRO-3, FSDP): keep the dims chosen at the start
    handle = apply_wemask(model, config.with_updates(dims=None))
    handle.remove()
    return handle.config


# ---------------------------------------------------------------------------------------------------------------
# Records written with every checkpoint and the final output


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("wemask-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


class RunRecord:
    """What a run writes next to its weights: wemask_config.json and wemask_run.json."""

    def __init__(self, stage: Stage, opts: dict, args, provenance: dict, resumed_from: str | None):
        self.stage, self.opts, self.args = stage, opts, args
        self.provenance, self.resumed_from = provenance, resumed_from
        self.wemask: WeMaskConfig | None = None
        self.source: str | None = None
        self.data_format: str | None = None
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def run_json(self, config: WeMaskConfig | None = None) -> dict:
        return _jsonable(
            {
                "stage": self.stage.name,
                "command": sys.argv,
                "started": self.started,
                "resumed_from": self.resumed_from,
                "seed": self.args.seed,
                "world_size": self.args.world_size,
                "model_source": self.source,
                "data_format": self.data_format,
                "wemask": (config or self.wemask).to_dict() if (config or self.wemask) else None,
                "options": self.opts,
                "trl_config_class": self.stage.config_class.__name__,
                "trl_args": self.args.to_dict(),
                "set_by": self.provenance,
                "versions": versions(),
            }
        )

    def write(self, directory: str | Path, model=None) -> WeMaskConfig | None:
        """Write both files; returns the WeMask config written (free mode: dims from the weights saved)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = self.wemask
        if config is not None and config.mode == "free" and model is not None:
            config = free_mode_dims(model, config)
        if config is not None:
            config.save(directory)
        (directory / RUN_NAME).write_text(json.dumps(self.run_json(config), indent=2) + "\n")
        return config


def make_callbacks(record: RunRecord):
    from transformers import TrainerCallback

    class WeMaskCheckpointCallback(TrainerCallback):
        """Writes wemask_config.json + wemask_run.json into each checkpoint the trainer saves (main process)."""

        def on_save(self, args, state, control, model=None, **kwargs):
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            if state.is_world_process_zero:
                record.write(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}", model)

    return WeMaskCheckpointCallback()


class Interrupt:
    """SIGINT/SIGTERM: finish the current step, save a checkpoint, stop. A second Ctrl-C aborts at once."""

    def __init__(self):
        self.requested = False
        self.stopped_at: int | None = None
        self._previous = {}

    def _handler(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        say(f"{signal.Signals(signum).name} received: saving a checkpoint after this step, then stopping (Ctrl-C again aborts without saving)")

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def callback(self):
        from transformers import TrainerCallback

        interrupt = self

        class SaveOnInterruptCallback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                requested = interrupt.requested
                if args.world_size > 1:  # every process must agree, or saving (a collective under FSDP/ZeRO) hangs
                    import torch
                    import torch.distributed as dist

                    if dist.is_available() and dist.is_initialized():
                        flag = torch.tensor([1.0 if requested else 0.0], device=args.device)
                        dist.all_reduce(flag)
                        requested = bool(flag.item() > 0)
                if requested:
                    interrupt.requested = True
                    interrupt.stopped_at = state.global_step
                    control.should_save = True
                    control.should_training_stop = True
                return control

        return SaveOnInterruptCallback()


def loss_history(trainer) -> list[list[float]]:
    return [[entry["step"], entry["loss"]] for entry in trainer.state.log_history if "loss" in entry and "step" in entry]


def write_metrics(trainer, output, ctx: TrainContext, config: WeMaskConfig, seconds: float, eval_metrics: dict) -> dict:
    """metrics.json: a flat summary `wemask report` reads (keys documented in the README)."""
    history = loss_history(trainer)
    summary = next((e for e in reversed(trainer.state.log_history) if "train_loss" in e), {})
    metrics = {
        "stage": ctx.stage.name,
        "status": "finished",
        "mode": config.mode,
        "mask_rate": config.mask_rate,
        "me_layer": config.me_layer,
        "select": config.select,
        "layers": config.layers,
        "strength": config.strength,
        "model": ctx.loaded.source,
        "dataset": ctx.options["dataset"],
        "peft": bool(ctx.peft_config),
        "seed": ctx.args.seed,
        "world_size": ctx.args.world_size,
        "global_step": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "train_loss": summary.get("train_loss"),
        "final_loss": history[-1][1] if history else summary.get("train_loss"),  # no step logged: the run's mean
        "eval_loss": eval_metrics.get("eval_loss"),
        "runtime_s": round(seconds, 3),
        "train_samples_per_second": summary.get("train_samples_per_second"),
        "train_steps_per_second": summary.get("train_steps_per_second"),
        "loss_history": history,
    }
    if ctx.stage.extra_metrics:
        metrics.update(ctx.stage.extra_metrics(trainer))
    metrics = _jsonable(metrics)
    (Path(output) / METRICS_NAME).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


# ---------------------------------------------------------------------------------------------------------------
# LoRA


def lora_config(opts: dict, model):
    """PEFT's LoraConfig for --use-peft (else None); every named target must be a module of `model`."""
    if not opts["use_peft"]:
        return None
    from peft import LoraConfig

    targets = opts["lora_target_modules"]
    if isinstance(targets, str):
        targets = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    if isinstance(targets, (list, tuple)):  # PEFT matches a name or a dotted suffix of one; a miss is its traceback
        names = [name for name, _ in model.named_modules()]
        unknown = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
        if unknown:
            import torch

            linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
            raise WeMaskError(
                f"--lora-target-modules: {', '.join(map(str, unknown))} is not a module of this model; "
                f"use names like {','.join(linear[:8])}, or all-linear"
            )
    return LoraConfig(
        r=int(opts["lora_r"]),
        lora_alpha=int(opts["lora_alpha"]),
        lora_dropout=float(opts["lora_dropout"]),
        target_modules=targets or None,
        task_type="CAUSAL_LM",
    )


# ---------------------------------------------------------------------------------------------------------------
# The run


def trl_help(stage: Stage) -> str:
    return _trl_parser(stage.config_class).format_help()


def run(stage: Stage, options: TrainOptions, extra_args: list[str] = (), callbacks: list | None = None) -> RunResult:
    """Resolve, load, build the stage's trainer, install WeMask on the trained model, train, save."""
    opts, args, provenance = resolve(stage, options, list(extra_args))
    check_options(opts, stage.name)
    if stage.check:
        stage.check(opts, args)
    output = Path(opts["output_dir"]).expanduser()
    explicit = getattr(args, "resume_from_checkpoint", None)  # TRL's own --resume-from-checkpoint PATH
    if explicit:
        if not (Path(explicit) / "trainer_state.json").is_file():
            raise WeMaskError(f"--resume-from-checkpoint {explicit}: not a checkpoint directory (no trainer_state.json)")
        inside = Path(explicit).resolve().parent == output.resolve()
        if inside and opts["overwrite"]:
            raise WeMaskError(f"--overwrite would delete {explicit}, the checkpoint to resume from: drop one of them")
        prepare_output_dir(output, bool(opts["overwrite"]), bool(opts["resume"]) or inside, args)
        resume_from = str(explicit)
    else:
        resume_from = prepare_output_dir(output, bool(opts["overwrite"]), bool(opts["resume"]), args)

    from ..data import load_training_data
    from ..models import load_model

    with args.main_process_first(desc="loading data"):
        train_dataset, fmt = load_training_data(
            stage.name, opts["dataset"], split=opts["dataset_split"], config=opts["dataset_config"], columns=opts["dataset_columns"]
        )
        eval_dataset = None
        if opts["eval_dataset"]:
            eval_dataset, _ = load_training_data(
                stage.name, opts["eval_dataset"], split=opts["eval_split"], config=opts["dataset_config"],
                columns=opts["dataset_columns"], what="--eval-dataset",
            )
    say(f"{stage.name}: {len(train_dataset)} examples ({fmt.name}) from {opts['dataset']}")
    quantization = "4bit" if opts["load_in_4bit"] else "8bit" if opts["load_in_8bit"] else None
    model_spec = opts["model"]
    if model_spec and Path(str(model_spec)).expanduser().is_dir():
        model_spec = str(Path(str(model_spec)).expanduser().resolve())  # adapters record their base by this path
    loaded = load_model(model_spec, dtype=opts["dtype"], quantization=quantization)
    if resume_from:
        config = WeMaskConfig.load(resume_from) if (Path(resume_from) / CONFIG_NAME).is_file() else None
        asked = requested_wemask(opts, loaded, args, provenance) if opts["mask_rate"] is not None else None
        if config is None:
            config = asked or WeMaskConfig(mode=opts["mode"])
        elif asked is not None and asked.with_updates(dims=None, seed=config.seed) != config.with_updates(dims=None):
            raise WeMaskError(
                f"--resume: the run was started with WeMask {config.describe()}, not {asked.describe()}: resume with the same flags"
            )
    else:
        config = requested_wemask(opts, loaded, args, provenance)
    record = RunRecord(stage, opts, args, provenance, resume_from)
    record.source, record.data_format = loaded.source, fmt.name
    interrupt = Interrupt()
    ctx = TrainContext(
        stage=stage, options=opts, args=args, loaded=loaded, train_dataset=train_dataset, eval_dataset=eval_dataset,
        data_format=fmt, peft_config=lora_config(opts, loaded.model), wemask=config,
        callbacks=[*(callbacks or []), make_callbacks(record), interrupt.callback()],
    )
    trainer = stage.build_trainer(ctx)
    config = (stage.install_mask or install_on_model)(trainer, config, ctx)
    record.wemask = config
    say(f"WeMask {config.mode}: {config.describe()}" + (f"; resuming from {resume_from}" if resume_from else ""))

    start = time.perf_counter()
    with interrupt:
        trainer.train(resume_from_checkpoint=resume_from)
    seconds = time.perf_counter() - start
    if interrupt.stopped_at is not None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        checkpoint = str(output / f"{PREFIX_CHECKPOINT_DIR}-{interrupt.stopped_at}")
        say(f"interrupted: checkpoint saved to {checkpoint}; continue with the same command and --resume")
        return RunResult(output, True, checkpoint, None, config, trainer)

    eval_metrics = {}
    if eval_dataset is not None and str(getattr(args.eval_strategy, "value", args.eval_strategy)) == "no":
        eval_metrics = trainer.evaluate()
    trainer.save_model(str(output))
    metrics = None
    if trainer.is_world_process_zero():
        loaded.tokenizer.save_pretrained(str(output))
        config = record.write(output, trainer.model)
        metrics = write_metrics(trainer, output, ctx, config, seconds, eval_metrics)
        say(f"saved to {output} (final loss {metrics['final_loss']}, {metrics['global_step']} steps)")
    _barrier(args)
    return RunResult(output, False, None, metrics, config, trainer)
