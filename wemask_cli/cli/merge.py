"""`wemask merge`: flags; the work in `wemask_cli.commands.merge`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wemask_cli.cli.options import DtypeOpt, ReplaceOpt


def merge(
    run: Annotated[Path, typer.Argument(help="A LoRA training run's folder (wemask sft|dpo|grpo --use-peft -o RUN).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The merged model folder to write.")],
    dtype: DtypeOpt = "auto",
    overwrite: ReplaceOpt = False,
):
    """Merge a LoRA run into a full model folder (weights, tokenizer, the run's saved mask and interventions), which
    `wemask infer/eval --engine vllm` and `vllm serve` load like any model folder."""
    from wemask_cli.commands.merge import run_merge
    from wemask_cli.render.common import err_console

    written = run_merge(str(run), output, overwrite=overwrite, dtype=dtype)
    err_console.print(f"Wrote {', '.join(path.name for path in written)} to {output}")


def register(app: typer.Typer) -> None:
    app.command()(merge)
