"""The launch flags of the training commands (train/launch.py) in their `--help` section, and the line for a launch
flag given to a command that runs in one process (eval, infer, locate, ...). Torch-free."""

from __future__ import annotations

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


def not_here(option: str, command: str) -> str | None:
    """The line for a launch flag given to a command that runs in one process; None for any other option."""
    if option not in {name for flag in SHOWN_LAUNCH_FLAGS for name in flag.names}:
        return None
    return (f"{option} is a launch flag of the training commands (wemask sft, dpo, grpo, kto, rloo); "
            f"{command} runs in one process: drop {option}")
