"""Layer 6, the edge (ranks: tests/test_layers.py).

The `wemask` command line: flags, help, and user errors as one line (exit 2), never a traceback.

One module per command registers it (`register(app)`); each imports its work inside the command body, so
`wemask --help`, `wemask CMD --help` and usage errors never import torch, transformers or TRL.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated

import typer

from wemask_cli.cli import env, infer, launch, locate, merge, probe, report, serve, train
from wemask_cli.cli import eval as eval_command
from wemask_cli.cli.commands import CommandGroup, Interrupted, stopped
from wemask_cli.runtime import ranks
from wemask_cli.runtime.errors import WeMaskError

PAPERS = (
    "WeMask and the ME (massive emergence) layer: arXiv:2605.08504. "
    "Attention/residual sinks and their remedies (GatedNorm, PreAffine, gated attention): arXiv:2601.22966."
)
app = typer.Typer(
    cls=CommandGroup,  # commands whose flags come from plugins are built when run, not for `wemask --help`
    help="WeMask: mask the massive-activation token's attention input, at inference or while fine-tuning with TRL.\n\n"
    "Layer indices are 0-based everywhere (layer l is model.model.layers\\[l]).\n\n" + PAPERS,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
)


def show_version(value: bool) -> None:
    if value:
        from wemask_cli import __version__

        print(f"wemask {__version__}")
        raise typer.Exit()


@app.callback()
def wemask(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show every start-up line of the libraries (DeepSpeed's, bitsandbytes', ...).")
    ] = False,
) -> None:
    """WeMask for LLM inference and TRL fine-tuning."""
    if verbose:
        from wemask_cli.compat.notices import keep_log_notices

        keep_log_notices()


BUG_REPORT = (
    "wemask: this is a bug in wemask, not a problem with your input: please report it with the traceback above and "
    "the output of `wemask env`"
)


COMMANDS = (infer, locate, probe, train, eval_command, report, merge, serve, env)  # in `wemask --help` order (cli/commands.py)
CommandGroup.modules = COMMANDS


def quiet_libraries() -> None:
    """Library noise off (progress bars, bitsandbytes' CPU notice), without importing the libraries; their warnings
are quieted around the command only (compat/notices.py)."""
    from wemask_cli.compat.notices import drop_log_notices

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub is first imported
    if not sys.stderr.isatty():  # in a log, datasets' bars are lines of carriage returns: wemask's own lines remain
        os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:  # already imported (tests calling main() in-process): tell it directly
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    drop_log_notices()  # bitsandbytes' kernels-community notice on every CPU import, DeepSpeed's accelerator line
    if ranks.rank() != 0:  # under a launcher the main process speaks for all: the others' library chatter off too
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
        os.environ["TQDM_DISABLE"] = "1"  # read when tqdm is first imported: bars such as transformers' GGUF conversion's


def did_you_mean(message: str) -> str:
    """click's '(Possible options: --a, --b)' and 'Did you mean --a?' as one wording: '(did you mean --a or --b?)'."""
    import re

    match = re.search(r"\s*\(Possible options: ([^)]*)\)|\s*Did you mean ([^?]*)\?", message)
    if not match:
        return message
    options = (match.group(1) or match.group(2)).replace(", ", " or ")
    return f"{message[: match.start()]} (did you mean {options}?){message[match.end():]}"


def usage_error(err: Exception) -> None:
    """A click usage error as one line naming the command's --help (nothing for a bare `wemask`)."""
    message = did_you_mean(" ".join(err.format_message().split()))
    if message:  # empty for a bare `wemask`, whose help is already printed
        ctx = getattr(err, "ctx", None)  # None for a missing option value: then the command is argv's first word
        command = ctx.command_path if ctx else " ".join(["wemask", *[a for a in sys.argv[1:2] if not a.startswith("-")]])
        launch_line = launch.not_here(getattr(err, "option_name", None), command)
        print(f"wemask: error: {launch_line or message} (see '{command} --help')", file=sys.stderr)


def _terminated(signum, frame) -> None:
    """SIGTERM (a scheduler, `kill`): unwind as on an error, so the lock is released and a folder the command created
    and left empty is removed; the stop line and exit 143 (`stopped`)."""
    stopped(signum)


def unexpected(err: Exception) -> None:
    """An error wemask did not expect: one line and exit 2 when it was raised inside a library at an untested version
    (runtime/tested.py), else the traceback is printed followed by the line asking for a bug report (its note)."""
    from wemask_cli.runtime.tested import bug_report_note, failure_in_untested

    message = failure_in_untested(err)
    if message is None:
        err.add_note(bug_report_note(BUG_REPORT))
        return
    line = ranks.error_line(message)
    if line:
        print(line, file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2; Ctrl-C and SIGTERM one line each and exit
    130 and 143 (`stopped`)."""
    from wemask_cli.compat.notices import library_notices_quiet
    from wemask_cli.render.common import RichReporter
    from wemask_cli.runtime import progress
    from wemask_cli.runtime.tested import one_warning_per_command

    signal.signal(signal.SIGTERM, _terminated)  # training replaces it while it trains (save, then stop)
    try:
        quiet_libraries()
        progress.set_reporter(RichReporter())
        with library_notices_quiet(every_warning=ranks.rank() != 0), one_warning_per_command():
            code = app(prog_name="wemask", standalone_mode=False)  # usage errors come back here, not a boxed usage text
    except WeMaskError as err:
        line = ranks.error_line(str(err))  # under a launcher: once, by the main process, unless only this rank failed
        if line:
            print(line, file=sys.stderr)
        sys.exit(2)
    except (Interrupted, KeyboardInterrupt, typer.Abort):  # Abort: Ctrl-C at one of click's prompts
        stopped(signal.SIGINT)
    except Exception as err:
        if ranks.peer_lost(err):  # another process stopped first and printed why: no traceback
            if ranks.rank() == 0:
                print("wemask: error: stopped: another process of the run failed (its error is above)", file=sys.stderr)
            sys.exit(2)
        if not hasattr(err, "format_message"):  # not a click usage error (Typer 0.29 vendors click as typer._click)
            unexpected(err)
            raise
        if ranks.rank() == 0:  # the same argv on every process: said once
            usage_error(err)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)  # an int is typer.Exit's code (--help: 0)
