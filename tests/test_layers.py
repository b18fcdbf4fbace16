"""The dependency rule, read from the source: cli -> commands -> core -> method, nothing upward or sideways
between commands; only the CLI layer (cli/, render/) imports rich or typer. Imports inside functions count."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"
RANK = {"cli": 3, "render": 3, "commands": 2, "core": 1, "method": 0, "errors": -1}  # errors: imported by all
EDGE_ONLY = ("rich", "typer")


def layer(module: str) -> str:
    """wemask_cli.cli.infer -> cli; wemask_cli.commands.locate -> commands; wemask_cli.method.* -> method."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top == "__main__":  # `python -m wemask_cli`: the entry point
        return "cli"
    return top if top in RANK else "core"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file; `from . import x` names the submodule x."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if node.module is None or node.level and (PACKAGE.parent / base.replace(".", "/")).is_dir():
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return found


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        here = layer(name)
        for line, target in imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
            if target.split(".")[0] in EDGE_ONLY and here not in ("cli", "render"):
                found.append(f"{where}: only cli/ and render/ may import {target.split('.')[0]}")
            if not target.startswith("wemask_cli.") or layer(target) == here and here != "commands":
                continue
            there = layer(target)
            if RANK[there] > RANK[here] or (here == there == "commands" and target.split(".")[2] != name.split(".")[2]):
                found.append(f"{where}: {here} may not import {there} (cli -> commands -> core -> method)")
            if {here, there} == {"cli", "render"} and here == "render":
                found.append(f"{where}: render may not import cli")
    return found


def test_imports_follow_the_dependency_rule():
    assert violations() == []


def test_the_rule_catches_an_upward_import(tmp_path, monkeypatch):
    """The scanner itself: a core module importing a command, or rich, is reported."""
    fake = tmp_path / "wemask_cli"
    (fake / "commands").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "commands" / "__init__.py").write_text("")
    (fake / "commands" / "locate.py").write_text("from .infer import x\n")
    (fake / "commands" / "infer.py").write_text("")
    (fake / "masking.py").write_text("def f():\n    from .commands.locate import encode\n    import rich.console\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = violations()
    assert any("commands/locate.py:1 imports wemask_cli.commands.infer" in v for v in found), found
    assert any("masking.py:2 imports wemask_cli.commands.locate: core may not import commands" in v for v in found), found
    assert any("masking.py:3 imports rich.console: only cli/ and render/ may import rich" in v for v in found), found
