"""Rooms stay small, measured in statements and nesting, not lines (packing lines cannot hide a long function).

- A function: at most MAX_STATEMENTS statements (its docstring aside), the closures it defines included (they are
  part of its room); blocks nested at most MAX_DEPTH deep, where an if/for/while/with/try/match block, each `for`
  of a comprehension (a nested comprehension nests) and a nested function or lambda (a closure does not start the
  count again) each add a level; an elif continues its if.
- A class: at most MAX_CLASS_BODY statements outside its methods (fields, constants) and MAX_CLASS_STATEMENTS in
  all (its methods included).
- A module: at most MAX_MODULE_STATEMENTS statements and MAX_MODULE_LINES lines; its top-level code (what runs at
  import, outside functions, classes and imports) is a room like a function's.
- A class defined inside a function continues the function's nesting (its body is one more level).

No function is exempt by name: a Typer command's signature with many flags is one statement.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"
MAX_STATEMENTS = 40
MAX_DEPTH = 4
MAX_CLASS_BODY = 60
MAX_CLASS_STATEMENTS = 150
MAX_MODULE_STATEMENTS = 250
MAX_MODULE_LINES = 400
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)  # not top-level code
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def statements(node: ast.AST, into_methods: bool = True) -> int:
    """The statements inside `node` (not itself, not its docstring); a method counts as one without into_methods."""
    count, stack = 0, list(getattr(node, "body", []))
    if stack and isinstance(stack[0], ast.Expr) and isinstance(stack[0].value, ast.Constant) and isinstance(stack[0].value.value, str):
        stack.pop(0)
    while stack:
        child = stack.pop()
        count += 1
        if into_methods or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack += [grandchild for grandchild in ast.iter_child_nodes(child) if isinstance(grandchild, ast.stmt)]
    return count


def levels(node: ast.AST, parent: ast.AST) -> int:
    """How many levels `node` adds below `parent`."""
    if isinstance(node, COMPREHENSIONS):
        return len(node.generators)
    if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
        return 1
    elif_branch = isinstance(parent, ast.If) and parent.orelse == [node] and isinstance(node, ast.If)
    return int(isinstance(node, BLOCKS) and not elif_branch)


def nesting(node: ast.AST, depth: int = 0) -> int:
    """The deepest nesting inside `node`, through closures, comprehensions and nested classes."""
    deepest = depth
    for child in ast.iter_child_nodes(node):
        deepest = max(deepest, nesting(child, depth + levels(child, node)))
    return deepest


def room_problems(node: ast.AST, where: str) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        found = [f"{where}: {n} statements" for n in [statements(node)] if n > MAX_STATEMENTS]
        return found + [f"{where}: blocks nested {d} deep" for d in [nesting(node)] if d > MAX_DEPTH]
    if isinstance(node, ast.Module):
        found = [f"{where}: {n} statements at top level" for n in [statements(node)] if n > MAX_STATEMENTS]
        return found + [f"{where}: top-level blocks nested {d} deep" for d in [nesting(node)] if d > MAX_DEPTH]
    if isinstance(node, ast.ClassDef):
        found = [f"{where}: {n} statements in its body" for n in [statements(node, into_methods=False)] if n > MAX_CLASS_BODY]
        return found + [f"{where}: {n} statements" for n in [statements(node)] if n > MAX_CLASS_STATEMENTS]
    return []


def shape_problems(path: Path, name: str) -> list[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    problems = [f"{name}: {n} lines (split it: one concern per module)" for n in [len(source.splitlines())] if n > MAX_MODULE_LINES]
    problems += [f"{name}: {n} statements (split it: one concern per module)" for n in [statements(tree)] if n > MAX_MODULE_STATEMENTS]
    top_level = ast.Module(body=[node for node in tree.body if not isinstance(node, DEFINITIONS)], type_ignores=[])
    problems += room_problems(top_level, name)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            problems += room_problems(node, f"{name}::{node.name}")
    return problems


def test_functions_classes_and_modules_are_small_and_flat():
    problems = [p for path in sorted(PACKAGE.rglob("*.py"))
                for p in shape_problems(path, str(path.relative_to(PACKAGE.parent)))]
    assert not problems, "\n".join(problems)


def planted(tmp_path, source: str) -> list[str]:
    (tmp_path / "m.py").write_text(source)
    return shape_problems(tmp_path / "m.py", "m.py")


def test_the_check_sees_a_long_or_deep_function(tmp_path):
    deep = "def f(x):\n" + "".join("    " * i + f"    if x > {i}:\n" for i in range(5)) + "    " * 6 + "return x\n"
    long = "def g():\n" + "    x = 1\n" * 41
    assert planted(tmp_path, deep + long) == ["m.py::f: blocks nested 5 deep", "m.py::g: 41 statements"]


def test_packing_lines_hides_no_statements(tmp_path):
    packed = "def f(x):\n" + "".join(f"    a{i} = x + {i}; b{i} = a{i} * 2; c{i} = b{i} - 1\n" for i in range(59))
    assert max(len(line) for line in packed.splitlines()) < 160 and len(packed.splitlines()) == 60
    assert planted(tmp_path, packed) == ["m.py::f: 177 statements"]


def test_a_closure_does_not_restart_the_nesting(tmp_path):
    split = ("def f(rows):\n    for row in rows:\n        if row:\n            def g(cells):\n"
             "                for cell in cells:\n                    if cell:\n                        return cell\n"
             "            g(row)\n")
    assert planted(tmp_path, split) == ["m.py::f: blocks nested 5 deep"]  # g alone is 2 deep


def test_a_nested_comprehension_is_nesting(tmp_path):
    flat = "def f(grid, lock):\n    for rows in grid:\n        if rows:\n            with lock:\n                return [c for c in rows]\n"
    assert planted(tmp_path, flat) == []  # four levels: for, if, with, the comprehension
    nested = flat.replace("[c for c in rows]", "[[c for c in row] for row in rows]")
    assert planted(tmp_path, nested) == ["m.py::f: blocks nested 5 deep"]


def test_a_class_body_is_measured(tmp_path):
    fields = "class C:\n" + "".join(f"    x{i} = {i}\n" for i in range(200))
    assert planted(tmp_path, fields) == ["m.py::C: 200 statements in its body", "m.py::C: 200 statements"]
    method = "    def m{}(self):\n" + "        x = 1\n" * 9
    methods = "class D:\n" + "".join(method.format(i) for i in range(16))
    assert planted(tmp_path, methods) == ["m.py::D: 160 statements"]  # each method is short; the class is not


def test_top_level_code_is_a_room(tmp_path):
    deep = "import os\n" + "".join("    " * i + f"if os.sep == '{i}':\n" for i in range(5)) + "    " * 5 + "X = 1\n"
    long = "".join(f"if os.sep == '{i}':\n    X{i} = {i}\n" for i in range(21))
    assert planted(tmp_path, deep) == ["m.py: top-level blocks nested 5 deep"]
    assert planted(tmp_path, "import os\n" + long) == ["m.py: 42 statements at top level"]


def test_a_class_inside_a_function_continues_its_nesting(tmp_path):
    inner = ("def f(rows):\n    for row in rows:\n        if row:\n            class Inner:\n"
             "                def m(self, cells):\n                    for cell in cells:\n                        return cell\n")
    assert planted(tmp_path, inner) == ["m.py::f: blocks nested 5 deep"]  # Inner.m alone is 2 deep
