"""The commands of `wemask`, built when they are needed, so that `wemask --help` and `--version` load no plugin.

Each command module of cli/ registers its commands with `register(app)`. A module whose flags or help come from
plugins (the training stages, eval) also has `summaries()`: {command: help} known without loading any plugin. Its
commands are built only when one of them is run or asked for its help (`register(app, name)`); until then the
listing in `wemask --help` shows a placeholder with that help. Plugins load inside `register`, guarded
(wemask_cli/runtime/plugins.py): a broken one is a warning line, and the command is built without it.
"""

from __future__ import annotations

import functools
import signal
import sys
from typing import NoReturn

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_group

from wemask_cli.cli.options import Command, SwitchesWithoutType

RICH_MARKUP = "rich"
STOP_WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}


def stopped(signum: int, detail: str = "") -> NoReturn:
    """The one rule for a command stopped by a signal, training or not: Ctrl-C (SIGINT) is 'wemask: interrupted',
    exit 130; SIGTERM (`kill`, a scheduler) 'wemask: terminated (SIGTERM)', exit 143; `detail` follows on the line
    (a training run names the checkpoint it saved). Said once, by the main process."""
    from wemask_cli.runtime.ranks import is_main_process

    if is_main_process():
        print(f"wemask: {STOP_WORDS[signum]}" + (f": {detail}" if detail else ""), file=sys.stderr)
    sys.exit(128 + signum)


class Interrupted(Exception):
    """Ctrl-C in a command (Typer would turn it into a silent exit 130): main() says so on one line."""


def interruptible(callback):
    """The command, with Ctrl-C raised as Interrupted (typer's signature inspection follows __wrapped__)."""

    @functools.wraps(callback)
    def command(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None

    return command


def built(module, name: str | None = None) -> dict:
    """{command name: click command} of one cli module (`name`: the command asked for, for a lazy module)."""
    app = typer.Typer(rich_markup_mode=RICH_MARKUP, pretty_exceptions_enable=False)
    if name is None:
        module.register(app)
    else:
        module.register(app, name)
    for info in app.registered_commands:
        info.callback = interruptible(info.callback)
        if info.cls in (None, TyperCommand):  # app.command's default: the class that shows switches without a type
            info.cls = Command
    return dict(get_group(app).commands)


class CommandGroup(SwitchesWithoutType, TyperGroup):
    """The `wemask` group: its commands come from `modules` (in `wemask --help` order), the lazy ones built when
    resolved."""

    modules: tuple = ()

    def listing(self) -> dict:
        """{name: command} of every module, read once; a lazy command not built yet is a placeholder with its help."""
        if not hasattr(self, "owners"):
            self.owners, self.commands = {}, {}
            for module in self.modules:
                if not hasattr(module, "summaries"):
                    self.commands.update(built(module))
                    continue
                for name, text in module.summaries().items():
                    self.owners[name] = module
                    self.commands[name] = TyperCommand(name, help=text, rich_markup_mode=RICH_MARKUP)
        return self.commands

    def list_commands(self, ctx) -> list[str]:
        return list(self.listing())

    def get_command(self, ctx, cmd_name: str):
        return self.listing().get(cmd_name)

    def built_command(self, name: str):
        """The command `name`, built if it is lazy (loading the plugins it needs); None when there is no such command,
        or its plugin failed to load (the docs' CLI reference reads every command through this). The module's
        commands whose plugins that load left out go too, so no "did you mean" offers them."""
        if name in self.listing() and name in self.owners:
            module = self.owners.pop(name)
            commands = built(module, name)
            if name in commands:
                self.commands[name] = commands[name]
            else:
                del self.commands[name]
            for gone in module.left_out(name) if hasattr(module, "left_out") else ():
                if self.owners.get(gone) is module:
                    del self.owners[gone], self.commands[gone]
        return self.listing().get(name)

    def resolve_command(self, ctx, args: list[str]):
        """Build the lazy command `args[0]` names, then resolve as click does."""
        if args:
            self.built_command(args[0])
        return super().resolve_command(ctx, args)
