"""Settings of one training run: defaults < --config recipe.yaml < command-line flags, with where each came from.

wemask's own options are TrainOptions fields (options.py) plus the stage's own; every other flag is parsed by
transformers' HfArgumentParser into the stage's TRL config class (SFTConfig, DPOConfig, GRPOConfig), so no TRL
option is re-declared or hidden. TRL's `TrlParser` is not used: it parses everything at once (dataclass defaults
included), so it cannot tell a flag given from a default, which the precedence and the run record need.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wemask_cli.compat.argparse import parser_actions
from wemask_cli.runtime.errors import WeMaskError, first_line
from wemask_cli.train.distributed import apply_launcher_precision, check_deepspeed_config
from wemask_cli.train.options import CLI_ONLY, DEFAULTS, KINDS, TrainOptions, given_options
from wemask_cli.train.recipe import Recipe, read_recipe, recipe_path
from wemask_cli.train.trl_values import check_trl_value


@dataclass
class Resolved:
    """The resolved settings: wemask options, the TRL config, provenance, and the WeMask flags parsed once."""

    opts: dict
    args: Any  # the TRL config
    provenance: dict  # {"wemask": {key: default|recipe|flag}, "trl": {...}}
    mask: Any  # masking.MaskRequest
    remedies: list  # the other interventions the flags and recipe ask for (interventions.configs_from_options)


TRL_OUTPUT_DIR = "trainer_output"  # TRL's TrainingArguments.output_dir default


class _ArgError(Exception):
    pass


def trl_parser(config_class, prog: str | None = None):
    """HfArgumentParser for the TRL config class (its usage line names `prog`); errors raise instead of exiting (we
    print one line)."""
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message):  # argparse would print usage and exit 2 itself
            raise _ArgError(message)

    return Parser(config_class, prog=prog, allow_abbrev=False)


def trl_help(stage) -> str:
    return trl_parser(stage.config_class(), prog=f"wemask {stage.name}").format_help()


def explicit_trl_args(parser, extra_args: list[str], stage_name: str) -> dict:
    """Only the TRL options actually given in extra_args, typed by argparse (both --a-b and --a_b spellings).

    argparse has no "was this given" query, so defaults are suppressed for the parse and restored after."""
    from transformers.hf_argparser import string_to_bool

    _refuse_repeats(parser, extra_args, stage_name)
    explicit = argparse.Namespace()
    actions = parser_actions(parser)
    saved = [(action, action.default, action.required, action.type, action.nargs, action.const) for action in actions]
    try:
        for action in actions:
            action.default, action.required = argparse.SUPPRESS, False
            if action.type in (int, float):  # '--max-length None' sets an optional number to None
                action.type = _none_or(action.type)
            if action.type is string_to_bool and action.nargs is None:  # `bool | None` fields (bf16): a bare --bf16 is true
                action.nargs, action.const = "?", True
        try:
            namespace, unknown = parser.parse_known_args(list(extra_args), namespace=explicit)
        except _ArgError as err:
            raise WeMaskError(f"wemask {stage_name}: {err}") from None
    finally:
        for action, default, required, type_, nargs, const in saved:
            action.default, action.required, action.type, action.nargs, action.const = default, required, type_, nargs, const
    namespace = vars(namespace)
    namespace.pop("help", None)
    if unknown:
        _refuse_unknown(unknown, parser, stage_name)
    return namespace


def _refuse_repeats(parser, extra_args: list[str], stage_name: str) -> None:
    """One TRL field given under both spellings (`--max_steps 1 --max-steps 2`): refused, as argparse would silently
    keep the last. The same spelling twice keeps argparse's rule (the last wins), as in any command line."""
    seen: dict[str, str] = {}
    by_flag = {flag: action for action in parser_actions(parser) for flag in action.option_strings}
    for token in extra_args:
        flag = token.split("=")[0]
        action = by_flag.get(flag) if token.startswith("--") else None
        if action is None:
            continue
        if seen.setdefault(action.dest, flag) != flag:
            raise WeMaskError(f"wemask {stage_name}: {seen[action.dest]} and {flag} both set {action.dest}: give it once")


def _refuse_unknown(unknown: list[str], parser, stage_name: str) -> None:
    names = [a for a in unknown if a.startswith("-")] or unknown
    wemask_like = [n for n in names if n.lstrip("-").replace("-", "_").split("=")[0] in DEFAULTS]
    hint = ""
    if wemask_like:
        hint = " (wemask's own flags use hyphens: " + ", ".join("--" + n.lstrip("-").replace("_", "-").split("=")[0] for n in wemask_like) + ")"
    raise WeMaskError(
        f"wemask {stage_name}: unknown option(s) {' '.join(names)}: not a wemask flag nor a field of TRL's "
        f"{parser.dataclass_types[0].__name__}{hint}; see `wemask {stage_name} --help` and `--help-trl`"
    )


def _none_or(convert):
    def parse(text: str):
        return None if text.strip().lower() in ("none", "null") else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error messages
    return parse


def _is_bool_field(config_class, key: str) -> bool:
    hint = typing.get_type_hints(config_class).get(key)
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return hint is bool or (union and set(typing.get_args(hint)) <= {bool, type(None)})


def coerce_trl_value(parser, recipe: Recipe, key: str, value):
    """A recipe value for a TRL field, converted like the command line would (YAML reads 2e-5 as a string);
    booleans must be YAML booleans ("false" as a string is refused, not taken as true)."""
    if _is_bool_field(parser.dataclass_types[0], key):
        recipe.check_type(key, value, bool)
        return value
    for action in parser_actions(parser):
        if action.dest == key and action.type is not None and action.nargs != 0:  # not a --no_x switch
            try:
                return _converted(action.type, recipe, key, value)
            except (TypeError, ValueError):
                raise WeMaskError(f"{recipe.where(key)}: {key}: {value!r} is not a valid value{_integer_hint(action.type, value)}") from None
    return value


def _integer_hint(convert, value) -> str:
    """For an integer field given a whole number in exponent form (max_steps: 1e1): how to write it."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return f" (an integer field: write {int(number)})" if convert is int and number.is_integer() else ""


def _converted(convert, recipe: Recipe, key: str, value):
    """`value` through the field's argparse type (strings, and the strings of a list); a quoted number is refused."""
    if isinstance(value, list):
        return [convert(v) if isinstance(v, str) else v for v in value]
    if not isinstance(value, str):
        return value
    converted = convert(value)
    if key in recipe.quoted and isinstance(converted, (int, float)):
        raise WeMaskError(f"{recipe.where(key)}: {key} must be a number, not the text {value!r}: write it without quotes")
    return converted


def hardware_defaults(config_class) -> dict:
    """TRL defaults to bf16 and gradient checkpointing; without CUDA, train in float32 on the CPU without them."""
    import torch

    if torch.cuda.is_available():
        return {}
    names = {f.name for f in dataclasses.fields(config_class)}
    # transformers 5.2x renamed gradient_checkpointing to activation_checkpointing (the old name warns)
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {"use_cpu": True, "bf16": False, "fp16": False, checkpointing: False}


def intervention_options() -> dict:
    """{option key: type} of every registered intervention's flags (GatedNorm, PreAffine, ...); None = not given."""
    from wemask_cli.interventions import flag_specs

    return {spec.dest: spec.type for spec in flag_specs()}


def resolve_ours(stage, options: TrainOptions, recipe: Recipe, trl_fields: set) -> tuple[dict, dict]:
    """wemask's options (the stage's and the interventions' too) from defaults < recipe < flags: (values, source)."""
    remedies = intervention_options()
    ours = {**DEFAULTS, **stage.option_defaults, **dict.fromkeys(remedies)}
    kinds = {**KINDS, **stage.option_kinds, **{key: (int, float) if kind is float else kind for key, kind in remedies.items()}}
    cli_only = sorted(set(recipe.values) & set(CLI_ONLY))  # --config too (a TrainOptions flag, never a recipe key)
    if cli_only:
        raise WeMaskError(f"{recipe.where(cli_only[0])}: {cli_only} can only be given on the command line")
    unknown = sorted(set(recipe.values) - set(ours) - trl_fields)
    if unknown:
        raise WeMaskError(
            f"{recipe.where(unknown[0])}: unknown key(s) {unknown}: neither wemask options "
            f"({', '.join(sorted(set(ours) - set(CLI_ONLY)))}) nor fields of TRL's {stage.config_class().__name__}"
        )
    resolved, source = dict(ours), {key: "default" for key in ours}
    for key, value in recipe.values.items():
        if key in ours:
            recipe.check_type(key, value, kinds.get(key, str))
            resolved[key], source[key] = value, "recipe"
    for key in ("dataset", "eval_dataset", "model"):
        if source.get(key) == "recipe" and resolved[key]:
            resolved[key] = recipe_path(str(resolved[key]), recipe.path)
    for key, value in given_options(options).items():
        resolved[key], source[key] = value, "flag"
    return resolved, source


def default_eval_data(resolved: dict, source: dict, eval_strategy) -> None:
    """As TRL's scripts do: without --eval-dataset, evaluate on a split of --dataset when --eval-split
    (dataset_test_split) is given or evaluation is on (eval_strategy not 'no'; then the split defaults to 'test').
    A local file has no 'test' split (TRL's script stops on a KeyError there): one line, before anything loads."""
    strategy = getattr(eval_strategy, "value", eval_strategy)
    if resolved["eval_dataset"] or (source["eval_split"] == "default" and strategy == "no"):
        return
    if resolved.get("datasets"):  # a mixture's eval set is its test_split_size share
        if strategy != "no" and resolved.get("test_split_size") is None:
            raise WeMaskError(f"--eval-strategy {strategy} needs an eval set: add test_split_size to the `datasets:` recipe, or --eval-dataset")
        return
    resolved["eval_dataset"], source["eval_dataset"] = resolved["dataset"], "the --dataset (TRL's dataset_test_split)"
    if source["eval_split"] != "default":
        return
    resolved["eval_split"], source["eval_split"] = "test", "TRL's dataset_test_split default"
    if resolved["dataset"] and Path(str(resolved["dataset"])).expanduser().is_file():
        raise WeMaskError(
            f"--eval-strategy {strategy} evaluates, as in TRL, on the 'test' split of --dataset (dataset_test_split), and "
            f"{resolved['dataset']} is a local file with a single split: give --eval-dataset FILE, or --eval-split "
            "'train[-50:]' (rows of the same file), or --eval-strategy no"
        )


def resolve(stage, options: TrainOptions, extra_args: list[str]) -> Resolved:
    """Resolve the run's settings and parse the WeMask flags once (MaskRequest)."""
    from wemask_cli.mask_request.flags import MaskRequest

    config_class = stage.config_class()
    parser = trl_parser(config_class)
    trl_fields = {f.name for f in dataclasses.fields(config_class) if f.init}
    cli_trl = explicit_trl_args(parser, extra_args, stage.name)
    recipe = read_recipe(options.config)
    resolved, source = resolve_ours(stage, options, recipe, trl_fields)
    # output_dir is both a wemask option and a TRL field: --output-dir > --output_dir (TRL spelling) > recipe
    if "output_dir" in cli_trl and options.output_dir is None:
        resolved["output_dir"], source["output_dir"] = cli_trl["output_dir"], "flag"
    if not resolved.get("output_dir"):  # TRL's default; the folder is claimed as any other (never replaced unasked)
        resolved["output_dir"], source["output_dir"] = TRL_OUTPUT_DIR, "TRL's default"
    trl_values = {**hardware_defaults(config_class), **stage.trl_defaults}
    trl_source = {key: "default" for key in trl_values}
    for key, value in recipe.values.items():
        if key in trl_fields and key not in resolved:
            trl_values[key], trl_source[key] = coerce_trl_value(parser, recipe, key, value), "recipe"
            check_trl_value(config_class, key, trl_values[key], recipe.where(key))
    for key, value in cli_trl.items():
        check_trl_value(config_class, key, value, f"--{key.replace('_', '-')}")
        trl_values[key], trl_source[key] = value, "flag"
    if resolved["trust_remote_code"] and "trust_remote_code" in trl_fields:  # TRL loads reference models with it too
        trl_values["trust_remote_code"], trl_source["trust_remote_code"] = True, source["trust_remote_code"]
    apply_launcher_precision(trl_values, trl_source)  # accelerate's mixed_precision sets bf16/fp16, or conflicts in one line
    check_deepspeed_config(trl_values, "--deepspeed" if trl_source.get("deepspeed") == "flag" else f"{recipe.where('deepspeed')}: deepspeed")
    for old, new in (("gradient_checkpointing", "activation_checkpointing"), ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
        if trl_source.get(old) in ("recipe", "flag") and trl_source.get(new) == "default":
            del trl_values[new], trl_source[new]  # the user's spelling wins over our default
    trl_values["output_dir"] = str(resolved["output_dir"])
    try:
        (args,) = parser.parse_dict(trl_values)
    except (ValueError, TypeError) as err:
        raise WeMaskError(f"wemask {stage.name}: invalid TRL setting for {config_class.__name__}: {first_line(err)}") from None
    default_eval_data(resolved, source, args.eval_strategy)
    mask = MaskRequest.from_options(resolved, seed=args.seed if resolved["mask_rate"] is not None else None)  # seed: select=random
    from wemask_cli.interventions import configs_from_options

    remedies = configs_from_options({key: resolved[key] for key in intervention_options()})
    return Resolved(resolved, args, {"wemask": source, "trl": trl_source}, mask, remedies)
