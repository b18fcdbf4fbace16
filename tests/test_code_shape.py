"""Rooms stay small: no function over 60 lines (declarative flag lists excepted) and no nesting deeper than 4."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"
MAX_LINES = 60
MAX_DEPTH = 4
MAX_MODULE_LINES = 400
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
FLAG_LISTS = {"wemask_cli/cli/eval_flags.py::eval_"}  # a Typer command's signature: one declarative line per flag


def nesting(node: ast.AST, depth: int = 0) -> int:
    """The deepest block nesting inside `node`, not counting nested functions and classes (measured on their own)."""
    deepest = depth
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        elif_branch = isinstance(node, ast.If) and node.orelse == [child] and isinstance(child, ast.If)
        deepest = max(deepest, nesting(child, depth + (isinstance(child, BLOCKS) and not elif_branch)))
    return deepest


def shape_problems(path: Path, name: str) -> list[str]:
    source = path.read_text(encoding="utf-8")
    problems = []
    if len(source.splitlines()) > MAX_MODULE_LINES:
        problems.append(f"{name}: {len(source.splitlines())} lines (split it: one concern per module)")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        where = f"{name}::{node.name}"
        length = node.end_lineno - node.lineno + 1
        if length > MAX_LINES and where not in FLAG_LISTS:
            problems.append(f"{where}: {length} lines")
        if nesting(node) > MAX_DEPTH:
            problems.append(f"{where}: blocks nested {nesting(node)} deep")
    return problems


def test_functions_are_short_and_flat():
    problems = [p for path in sorted(PACKAGE.rglob("*.py"))
                for p in shape_problems(path, str(path.relative_to(PACKAGE.parent)))]
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_long_or_deep_function(tmp_path):
    deep = "def f(x):\n" + "".join("    " * i + f"    if x > {i}:\n" for i in range(5)) + "    " * 6 + "return x\n"
    long = "def g():\n" + "    x = 1\n" * 61
    (tmp_path / "m.py").write_text(deep + long)
    assert shape_problems(tmp_path / "m.py", "m.py") == ["m.py::f: blocks nested 5 deep", "m.py::g: 62 lines"]
