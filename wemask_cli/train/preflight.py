"""A training run's inputs checked before torch or TRL is imported: --dataset and --eval-dataset from their first
rows (data/preflight.py), --model and --me-layer from the model's config (models/preflight.py), TRL's --use-vllm
against the installed engines (the one that generates rollouts, and the package it needs). The values are the
flags', else the --config recipe's, else the defaults, as resolve.py settles them later with TRL's config class."""

from __future__ import annotations

from pathlib import Path

from wemask_cli.data.preflight import check_training_source
from wemask_cli.engines.base import NO_ROLLOUT_ENGINE, rollout_engine
from wemask_cli.mask_request.flags import parse_me_layer
from wemask_cli.models.preflight import check_model
from wemask_cli.outputs import check_writable, running_command
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.ranks import is_main_process
from wemask_cli.train.options import DEFAULTS, TrainOptions, given_options
from wemask_cli.train.recipe import Recipe, read_recipe, recipe_path
from wemask_cli.train.trl_flags import given_bool

PATH_KEYS = ("dataset", "eval_dataset", "model")  # a recipe's relative paths: from its folder too


def early_options(options: TrainOptions, recipe: Recipe) -> dict:
    """The options the checks read: defaults < recipe < flags (recipe paths resolved as resolve.py does)."""
    values = {**DEFAULTS, **{key: value for key, value in recipe.values.items() if key in DEFAULTS}}
    for key in PATH_KEYS:
        if key in recipe.values and values[key]:
            values[key] = recipe_path(str(values[key]), recipe.path)
    return {**values, **given_options(options)}


def check_output_folder(folder: Path) -> None:
    """The output folder cannot be created, or another live command holds it: the run's own refusal, at once.
    Under a launcher only the main process asks: the lock another rank would find may be its own run's (rank 0
    claims the folder as soon as its checks pass)."""
    check_writable(folder, is_dir=True, flag="--output-dir")  # a file in its way, a read-only parent
    running = running_command(folder) if is_main_process() else None
    if running is not None:
        raise WeMaskError(f"{folder} is in use by {running}: wait for it to finish or choose another folder")


def check_rollouts(extra_args: list[str], recipe: Recipe) -> None:
    """TRL's use_vllm asked (a flag, else the recipe): an installed engine generates the rollouts, with what it needs
    (vLLM's package), known without importing it."""
    asked = given_bool(extra_args, "use_vllm")
    if not (recipe.values.get("use_vllm") is True if asked is None else asked):
        return
    engine = rollout_engine()
    if engine is None:
        raise WeMaskError(NO_ROLLOUT_ENGINE)
    engine.rollouts().check_installed()


def preflight(spec, options: TrainOptions, extra_args: list[str] = ()) -> None:
    """What the run would refuse about its data, model and TRL's pass-through flags (`extra_args`) that is known
    without torch: one line, at once."""
    recipe = read_recipe(options.config)
    opts = early_options(options, recipe)
    check_output_folder(Path(str(opts.get("output_dir") or "trainer_output")).expanduser())  # the output first, as the run does
    if not opts.get("datasets"):  # a recipe's mixture is read as a whole (data/mixture.py)
        check_training_source(spec.data, opts["dataset"], split=opts["dataset_split"], columns=opts["dataset_columns"])
    if opts.get("eval_dataset"):
        check_training_source(spec.data, opts["eval_dataset"], split=opts["eval_split"], columns=opts["dataset_columns"],
                              what="--eval-dataset")
    check_model(opts["model"], parse_me_layer(opts["me_layer"]))
    check_rollouts(list(extra_args), recipe)
