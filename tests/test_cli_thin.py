"""cli/ only parses flags and renders: a command function imports from commands/ (one call does the work), render/,
and the parsers; never the model loader, output writers, progress or torch (issue 20)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parent.parent / "wemask_cli" / "cli"
WORKERS = {"models", "outputs", "runtime.progress", "torch", "transformers", "method", "engines"}


def imported_modules(function: ast.FunctionDef) -> list[str]:
    """The modules a function imports inside its body, wemask's own named inside the package
    (`wemask_cli.models.loading` -> models.loading)."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom):
            found.append(node.module or "")
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name.removeprefix("wemask_cli.") for name in found]


@pytest.mark.parametrize("module, command, source", [("locate", "locate", "locate"), ("infer", "infer", "infer_flags"),
                                                     ("eval", "eval_", "eval_flags")])
def test_a_cli_command_parses_calls_one_command_and_renders(module, command, source):
    tree = ast.parse((CLI / f"{source}.py").read_text())
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == command)
    modules = imported_modules(function)
    assert not [m for m in modules if m.split(".")[0] in WORKERS or m in WORKERS], modules
    commands = [m for m in modules if m.startswith("commands.")]
    assert set(commands) == {f"commands.{module}"}, modules
    calls = [node.func.id for node in ast.walk(function) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    runners = {alias.asname or alias.name for node in ast.walk(function) if isinstance(node, ast.ImportFrom)
               and node.module == f"wemask_cli.commands.{module}" for alias in node.names if not alias.name[0].isupper()}
    assert len([call for call in calls if call in runners]) == 1, (runners, calls)


def test_the_training_commands_reach_train_only_through_commands():
    """cli/train.py builds every trainer stage's command from commands/train.py, never from train/ directly, and the
    command itself makes one call, run_training."""
    tree = ast.parse((CLI / "train.py").read_text())
    everywhere = [(node.module or "").removeprefix("wemask_cli.") for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in everywhere if m.split(".")[0] == "train"], everywhere
    command = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "command")
    assert imported_modules(command) == ["commands.train"]
    calls = [node.func.id for node in ast.walk(command) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    assert calls.count("run_training") == 1, calls
