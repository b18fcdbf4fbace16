"""`wemask sft`, `wemask dpo`, `wemask grpo`, `wemask kto`, `wemask rloo` and every other registered trainer stage
(train/stage_registry.py): shared training flags, each stage's own (declared by the stage), TRL's passing through.
Everything it needs from training comes through commands/train.py."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Annotated, Optional

import typer

from wemask_cli.cli.commands import stopped
from wemask_cli.cli.launch import LAUNCH_NOTE, launch_options
from wemask_cli.cli.options import Command, LayersOpt, MeLayerOpt, SelectOpt, StrengthOpt, TokensOpt
from wemask_cli.commands.train import TrainOptions, alias_flags, trl_completions, trl_spellings

TRAIN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
TRAIN_EPILOG = (
    "Every other option is TRL's and passes through to the stage's TRL config class (SFTConfig, DPOConfig, GRPOConfig, ...), "
    "in either spelling (--learning-rate or --learning_rate): e.g. --learning-rate 2e-5 --per-device-train-batch-size 8 "
    "--gradient-accumulation-steps 4 --num-train-epochs 1 --max-steps 100 --max-length 1024 --packing --bf16 "
    "--gradient-checkpointing --logging-steps 10 --save-steps 500 --report-to wandb --seed 0. "
    "--help-trl lists them all. Precedence: defaults < --config recipe.yaml < flags. Without CUDA the defaults are "
    "use_cpu, no bf16, no gradient checkpointing; under accelerate launch the config's mixed_precision sets bf16/fp16. " + LAUNCH_NOTE
)
HelpTrlOpt = Annotated[bool, typer.Option("--help-trl", help="List every TRL option this command passes through, then exit.")]
SHARED_MASK_OPTIONS = {"me_layer": MeLayerOpt, "select": SelectOpt, "layers": LayersOpt, "strength": StrengthOpt, "tokens": TokensOpt}
INTERVENTIONS_PANEL = "Interventions (sink remedies, arXiv:2601.22966)"


def shown_default(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def train_options(options_class: type = TrainOptions) -> dict:
    """A typer option per field of `options_class` that is a flag (train/options.py declares each once: help, names,
    switch style, panel), in field order, with TRL's alias names (train/trl_vocabulary.py). Torch-free."""
    hints = typing.get_type_hints(options_class)
    flags = {}
    for field in dataclasses.fields(options_class):
        if "flag" not in field.metadata:
            continue
        spec, dashed = field.metadata["flag"], field.name.replace("_", "-")
        if spec["help"] is None:
            flags[field.name] = SHARED_MASK_OPTIONS[field.name]
            continue
        types = [t for t in typing.get_args(hints[field.name]) if t is not type(None)]
        kind = types[0] if len(types) == 1 else str  # --mask-rate 0.3 or auto-like words: parsed later
        first = f"--{dashed}/--no-{dashed}" if spec["negatable"] else f"--{dashed}"
        help_text = spec["help"].replace("{default}", shown_default(field.metadata.get("default")))
        option = typer.Option(first, *spec["names"], *alias_flags(field.name), help=help_text, rich_help_panel=spec["panel"])
        flags[field.name] = Annotated[Optional[kind], option]
    return flags


def intervention_flags() -> dict:
    """A typer option per flag the registered interventions declare (GatedNorm, PreAffine, gated attention, ...):
    adding an intervention adds its flags here without touching this file. Torch-free."""
    from wemask_cli.interventions import flag_specs

    flags = {}
    for spec in flag_specs():
        default = "" if spec.default is None or spec.type is bool else f" (default {shown_default(spec.default)})"
        choices = f": {' | '.join(spec.choices)}" if spec.choices else ""  # no [brackets]: rich reads them as markup
        names = (f"{spec.name}/--no-{spec.name[2:]}",) if spec.type is bool else (spec.name,)
        option = typer.Option(*names, help=f"{spec.help}{choices}{default}.", rich_help_panel=INTERVENTIONS_PANEL)
        flags[spec.dest] = Annotated[Optional[spec.type], option]
    return flags


def stage_option(flag) -> object:
    """The typer option for one of a stage's own flags (stage_registry.StageFlag)."""
    if flag.type is bool:
        return Annotated[Optional[bool], typer.Option(f"{flag.flag}/--no-{flag.flag[2:]}", help=flag.help)]
    if flag.type is list:
        return Annotated[Optional[list[str]], typer.Option(flag.flag, *alias_flags(flag.dest), help=flag.help)]
    return Annotated[Optional[flag.type], typer.Option(flag.flag, help=flag.help)]


def one_line_paragraphs(text: str) -> str:
    """Help text with each paragraph on one line, so the terminal wraps it (typer keeps the source's line breaks)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in paragraphs)


def training_command(app: typer.Typer, spec) -> None:
    """Register `wemask STAGE` from its declaration (stage_registry.StageSpec): the shared training flags, the stage's own
    flags, and TRL's passing through. The stage's class is imported only when the command runs."""
    stage_flags = {flag.dest: stage_option(flag) for flag in spec.all_flags()}

    def command(ctx: typer.Context, help_trl: bool = False, **options) -> None:
        from wemask_cli.commands.train import run_training

        own = [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)]
        stage_options = {name: options.pop(name) for name in stage_flags}
        remedy_options = {name: options.pop(name) for name in remedy_flags}
        launch_values = {name: options.pop(name) for name in launch_flags}
        done = run_training(spec, options, stage_options, remedy_options, ctx.args, own, help_trl, launch_values)
        if done.trl_help is not None:
            print(done.trl_help)
        if done.stopped_by is not None:
            stopped(done.stopped_by, f"checkpoint saved to {done.checkpoint}; continue with the same command and --resume")
        if done.exit_code:
            raise typer.Exit(done.exit_code)

    keyword = inspect.Parameter.KEYWORD_ONLY
    remedy_flags, launch_flags = intervention_flags(), launch_options()
    flags = {**train_options(), **stage_flags, **remedy_flags, **launch_flags}
    command.__signature__ = inspect.Signature(
        [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
        + [inspect.Parameter(name, keyword, default=None, annotation=flag) for name, flag in flags.items()]
        + [inspect.Parameter("help_trl", keyword, default=False, annotation=HelpTrlOpt)]
    )
    command.__doc__ = one_line_paragraphs(spec.help)
    app.command(spec.name, cls=TrlSpellingCommand, context_settings=TRAIN_CONTEXT, epilog=TRAIN_EPILOG)(command)


class TrlSpellingCommand(Command):
    """A training command that also takes TRL's spellings of wemask's own options (see train/trl_vocabulary.py)."""

    def parse_args(self, ctx, args):
        own = {name for param in self.params for name in (*param.opts, *param.secondary_opts)}
        return super().parse_args(ctx, trl_spellings(args, own))

    def shell_complete(self, ctx, incomplete):
        """wemask's options, then TRL's that pass through (`wemask sft --learning<TAB>`: --learning-rate)."""
        from click.shell_completion import CompletionItem

        found = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("--"):
            own = {item.value for item in found} | {name for param in self.params for name in (*param.opts, *param.secondary_opts)}
            found += [CompletionItem(flag, help="TRL") for flag in trl_completions(self.name, incomplete) if flag not in own]
        return found


def summaries() -> dict[str, str]:
    """{command: help} of every trainer stage, known without loading a plugin: the built-in stages' own help, and for
    a plugin's stage (listed from its entry point's metadata) where it comes from."""
    from wemask_cli.commands.train import builtin_specs, plugin_stage_names

    found = {name: spec.help for name, spec in builtin_specs().items()}
    for name, source in plugin_stage_names().items():
        found[name] = f"A trainer stage from a plugin ({source}): `wemask {name} --help` describes it."
    return found


def left_out(name: str) -> set[str]:
    """The plugin stages summaries() lists whose plugin failed to load, once building `name` loaded the stage plugins
    (a built-in stage loads none: then nothing is known)."""
    from wemask_cli.commands.train import builtin_specs, plugin_stage_names, stage_specs

    return set() if name in builtin_specs() else set(plugin_stage_names()) - set(stage_specs())


def register(app: typer.Typer, name: str) -> None:
    """The command of the trainer stage `name` (train/stage_registry.py): a built-in one, or a plugin's (the stage plugins
    then load). Its intervention flags load the intervention plugins; a broken plugin is one warning line."""
    from wemask_cli.commands.train import stage_specs

    spec = stage_specs(name).get(name)
    if spec is not None:
        training_command(app, spec)
