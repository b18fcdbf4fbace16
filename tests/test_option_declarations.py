"""wemask's training options are declared once, as TrainOptions fields (train/options.py): their flags (names, TRL's
aliases, switch style), help with the default filled in, --help panel and recipe keys are derived from the fields."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields

import pytest

from wemask_cli.cli.train import SHARED_MASK_OPTIONS, train_options
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import CLI_ONLY, DEFAULTS, RECIPE_ONLY, TRL_PANEL, TrainOptions, option
from wemask_cli.train.resolve import resolve
from wemask_cli.train.sft import SFTStage
from wemask_cli.train.trl_vocabulary import alias_flags


def declared(annotation) -> tuple[type, tuple[str, ...], str, str | None]:
    """(value type, flag names, help, panel) of an `Annotated[Optional[T], typer.Option(...)]`."""
    value, info = typing.get_args(annotation)
    names = (info.default, *info.param_decls)  # with Annotated, typer takes the first positional as a name
    return typing.get_args(value)[0], names, info.help, info.rich_help_panel


def test_every_flag_field_is_a_typer_option_with_its_names_style_and_panel():
    flags = train_options()
    assert list(flags) == [f.name for f in fields(TrainOptions) if "flag" in f.metadata]
    assert declared(flags["model"])[1] == ("--model", "-m", *alias_flags("model")) == ("--model", "-m", "--model-name-or-path")
    assert declared(flags["eval_split"])[1] == ("--eval-split", "--dataset-test-split")
    assert declared(flags["use_peft"])[:2] == (bool, ("--use-peft/--no-use-peft",))
    assert declared(flags["load_in_4bit"])[:2] == (bool, ("--load-in-4bit",))
    assert declared(flags["mask_rate"])[:2] == (str, ("--mask-rate", "-r"))  # float | str: parsed by MaskRequest
    assert declared(flags["lora_r"])[0] is int and declared(flags["lora_dropout"])[0] is float
    assert all(flags[name] is shared for name, shared in SHARED_MASK_OPTIONS.items())  # infer's and eval's help
    panels = {name: declared(flag)[3] for name, flag in flags.items() if name not in SHARED_MASK_OPTIONS}
    assert [name for name, panel in panels.items() if panel == TRL_PANEL] == [
        "lora_modules_to_save", "lora_task_type", "use_dora", "use_rslora", "model_revision", "attn_implementation",
        "trust_remote_code", "bnb_4bit_quant_type", "use_bnb_nested_quant",
    ]  # fmt: skip


def test_help_shows_the_field_default_and_recipe_keys_are_the_same_fields():
    flags = train_options()
    helps = {name: declared(flag)[2] for name, flag in flags.items() if name not in SHARED_MASK_OPTIONS}
    assert not [name for name, text in helps.items() if "{default}" in text or not text]
    assert helps["lora_r"] == f"LoRA rank (default {DEFAULTS['lora_r']})." == "LoRA rank (default 16)."
    assert "(default on)" in helps["use_bnb_nested_quant"] and "(default off;" in helps["trust_remote_code"]
    assert "(default train;" in helps["dataset_split"]
    assert set(DEFAULTS) - set(RECIPE_ONLY) == set(flags) - {"config"} and CLI_ONLY == ("config", "overwrite", "resume")
    assert RECIPE_ONLY == ("datasets", "test_split_size")  # TRL's mixture: a list of entries, no flag form


@dataclass
class ToyOptions(TrainOptions):
    toy_steps: int | None = option(3, int, "Toy steps (default {default}).", panel="Toy panel")
    toy_switch: bool | None = option(False, bool, "A toy switch (default {default}).", negatable=True)


def test_a_new_field_is_a_new_flag_with_nothing_else_to_write():
    flags = train_options(ToyOptions)
    assert list(flags)[-2:] == ["toy_steps", "toy_switch"]
    assert declared(flags["toy_steps"]) == (int, ("--toy-steps",), "Toy steps (default 3).", "Toy panel")
    assert declared(flags["toy_switch"]) == (bool, ("--toy-switch/--no-toy-switch",), "A toy switch (default off).", None)


def test_command_line_only_fields_are_refused_in_a_recipe_by_name(tmp_path):
    recipe = tmp_path / "r.yaml"
    for key in CLI_ONLY:
        recipe.write_text(f"{key}: other.yaml\n" if key == "config" else f"{key}: true\n")
        with pytest.raises(WeMaskError, match=rf"line 1: \['{key}'\] can only be given on the command line"):
            resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir="o"), [])
