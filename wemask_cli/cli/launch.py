"""The launch flags (runtime/launch.py) in their `--help` section: the training commands', and `launchable` for the
data-parallel ones (eval, infer, locate); the line for a launch flag given to a command that runs in one process
(report, merge, env). Torch-free."""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Optional

import typer

from wemask_cli.commands.train import SHOWN_LAUNCH_FLAGS

LAUNCH_PANEL = "Launch (accelerate)"
LAUNCH_NOTE = (
    "Several processes: the Launch (accelerate) flags and every other `accelerate launch` option (--multi_gpu, "
    "--gpu_ids, --rdzv_backend, ...) start the run through accelerate launch, as `trl sft` does; "
    "`accelerate launch -m wemask_cli sft ...` and `torchrun --nproc_per_node N -m wemask_cli sft ...` work too."
)


def launch_options() -> dict:
    """{dest: typer option} of each launch flag --help lists, in its own section."""
    options = {}
    for flag in SHOWN_LAUNCH_FLAGS:
        option = typer.Option(flag.names[0], metavar=flag.metavar, help=flag.help, rich_help_panel=LAUNCH_PANEL)
        options[flag.dest] = Annotated[Optional[flag.type], option]
    return options


DATA_PARALLEL = ("eval", "infer", "locate")  # the commands `launchable` gives the launch flags to


def launchable(command):
    """`command` with the launch flags --help lists: given one, `accelerate launch` starts the processes on the rest of
    the command line (runtime/launch.py) and this process exits with their exit code; each process then works on its
    share of the batches (runtime/ranks.py map_batches)."""
    options = launch_options()
    signature = inspect.signature(command, eval_str=True)  # typer reads the types, not their names
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [*signature.parameters.values(), *(inspect.Parameter(d, keyword, default=None, annotation=o) for d, o in options.items())]

    @functools.wraps(command)
    def run(**values):
        given = {dest: values.pop(dest) for dest in options}
        if all(value is None for value in given.values()):
            return command(**values)
        from wemask_cli.runtime.launch import launch

        code = launch({name: True for flag in SHOWN_LAUNCH_FLAGS for name in flag.names})  # each takes a value
        raise typer.Exit(code)

    run.__signature__ = signature.replace(parameters=params)
    return run


def not_here(option: str, command: str) -> str | None:
    """The line for a launch flag given to a command that runs in one process; None for any other option."""
    if option not in {name for flag in SHOWN_LAUNCH_FLAGS for name in flag.names}:
        return None
    many = ", ".join(f"wemask {name}" for name in DATA_PARALLEL)
    return (f"{option} is a launch flag of the training commands (wemask sft, dpo, grpo, kto, rloo) and of {many}; "
            f"{command} runs in one process: drop {option}")
