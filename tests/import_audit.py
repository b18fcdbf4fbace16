"""The imports Python really executes: run as `python tests/import_audit.py ROOT [--help]`, in a fresh process.

It records which wemask_cli module imported which module while it runs `wemask --help` and `wemask CMD --help` for
every command (with --help) and then imports every module under ROOT/wemask_cli (but __main__), and prints them as
JSON: {"edges": [[importer, imported, how], ...], "execs": [[module, event], ...], "failed": {module: error},
"planted": [a wemask_cli name in sys.modules that is no module file under ROOT: put there by hand]}.

Three witnesses, so that no way of importing goes unseen:
- `builtins.__import__` wrapped: every `import` statement, cached or not, with the importer's globals (relative
  names resolved as Python resolves them, `from pkg import sub` recorded as pkg.sub);
- `importlib.import_module` wrapped before anything of wemask loads (so `from importlib import import_module as
  load` and `getattr(importlib, "import_module")` get the wrapper): the caller's module;
- an audit hook (sys.addaudithook): "import" (every first load, by any route; the importer is the nearest module
  frame) and "exec"/"compile" run from a wemask_cli frame.
"""

from __future__ import annotations

import builtins
import importlib
import json
import sys
from pathlib import Path

HERE = __file__
SKIPPED = ("importlib", "importlib._bootstrap", "importlib._bootstrap_external", "_frozen_importlib",
           "_frozen_importlib_external")
edges: set[tuple[str, str, str]] = set()
execs: set[tuple[str, str]] = set()


def ours(name) -> bool:
    return isinstance(name, str) and (name == "wemask_cli" or name.startswith("wemask_cli."))


def importer_frame(start):
    """The nearest frame of a module that is neither importlib's nor this file's: (its module name, or None)."""
    frame = start
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if frame.f_code.co_filename != HERE and name not in SKIPPED:
            return name
        frame = frame.f_back
    return None


def absolute(name: str, package: str | None, level: int) -> str:
    if not level:
        return name
    base = (package or "").rsplit(".", level - 1)[0]
    return f"{base}.{name}" if name else base


def record(importer, name: str, how: str, fromlist=()) -> None:
    """`from name import a, b`: name.a where that is a module, else name (as the static reader counts it)."""
    if not ours(importer):
        return
    items = [item for item in fromlist or () if item != "*"]
    for item in items:
        edges.add((importer, f"{name}.{item}" if f"{name}.{item}" in sys.modules else name, how))
    if not items:
        edges.add((importer, name, how))


original_import = builtins.__import__
original_import_module = importlib.import_module


def traced_import(name, globals=None, locals=None, fromlist=(), level=0):
    globals = globals if globals is not None else sys._getframe(1).f_globals  # `__import__(name)` called bare
    importer = globals.get("__name__")
    package = globals.get("__package__") or (importer if "__path__" in globals else (importer or "").rpartition(".")[0])
    target = absolute(name, package, level)
    try:
        return original_import(name, globals, locals, fromlist, level)
    finally:
        record(importer, target, "import", fromlist)


def traced_import_module(name, package=None):
    importer = importer_frame(sys._getframe(1))
    level = len(name) - len(name.lstrip("."))
    target = absolute(name.lstrip("."), package, level)
    try:
        return original_import_module(name, package)
    finally:
        record(importer, target, "import_module")


def audit(event: str, args) -> None:
    if event == "import":
        record(importer_frame(sys._getframe(1)), args[0], "audit")
    elif event in ("exec", "compile"):  # run by wemask code itself (the import system's own exec has its frame)
        caller = sys._getframe(1).f_globals.get("__name__")
        if ours(caller):
            execs.add((caller, event))


def every_module(root: Path) -> list[str]:
    names = []
    for path in sorted((root / "wemask_cli").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts[-1] != "__main__":
            names.append(".".join(parts))
    return names


def run_help() -> None:
    """`wemask --help` and `wemask CMD --help` for every command, through the real entry point."""
    import typer.main

    from wemask_cli.cli import app, main

    group = typer.main.get_command(app)
    for argv in [["--help"]] + [[name, "--help"] for name in group.list_commands(None)]:
        sys.argv = ["wemask", *argv]
        try:
            main()
        except SystemExit:
            pass


def main(root: Path, with_help: bool) -> dict:
    builtins.__import__, importlib.import_module = traced_import, traced_import_module
    sys.addaudithook(audit)
    sys.path.insert(0, str(root))
    failed = {}
    if with_help:
        sys.stdout = open("/dev/null", "w")  # the help texts; the report goes to the real stdout
        run_help()
        sys.stdout = sys.__stdout__
    for name in every_module(root):
        try:
            original_import_module(name)
        except Exception as err:  # an optional engine's library absent, or a planted module that fails
            failed[name] = f"{type(err).__name__}: {err}"
    files = set(every_module(root)) | {"wemask_cli.__main__"}
    planted = sorted(name for name in sys.modules if ours(name) and name not in files)
    return {"edges": sorted(edges), "execs": sorted(execs), "failed": failed, "planted": planted}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), "--help" in sys.argv[2:])))
