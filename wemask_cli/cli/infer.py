"""`wemask infer`: registered lazily (its --engine help comes from the engine registry, whose plugins load only when
the command is built); the flags are in infer_flags.py, the work in `wemask_cli.commands.infer`."""

from __future__ import annotations

import typer

INFER_HELP = """Generate with and without WeMask; several --mask-rate values are shown side by side (one model load).

Without --mask-rate, the wemask_config.json saved in the model directory is applied, else no mask.
"""


def summaries() -> dict[str, str]:
    return {"infer": INFER_HELP}


def register(app: typer.Typer, name: str) -> None:
    """`wemask infer` (imports its flags, which load the engine plugins)."""
    from wemask_cli.cli.infer_flags import infer
    from wemask_cli.cli.launch import launchable

    app.command(name, help=INFER_HELP)(launchable(infer))  # under a launcher: every process its share of the batches
