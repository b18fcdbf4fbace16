"""Plugins: what other packages declare under wemask's entry-point groups (`wemask.interventions`, `wemask.stages`,
`wemask.eval_tasks`, `wemask.quantization`; wemask_cli/runtime/registry.py reads those of its registries), loaded once per
process and only when a command needs them (never for `wemask --help` or `--version`). Whatever goes wrong while a
plugin loads or registers (an import error, a SyntaxError, a RuntimeError, even SystemExit, a bad declaration, a
name another entry already has) is one warning line naming the plugin's entry point and distribution; that plugin
is left out, what it had registered is undone, and the rest works. Imports nothing heavy."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from wemask_cli.runtime.progress import warn

FAILURES = (Exception, SystemExit)  # a plugin calling sys.exit() must not end wemask; Ctrl-C still does


def source_of(point: EntryPoint) -> str:
    """'toy = toy_stage:STAGE' from the distribution wemask-toy 0.1: what a warning names."""
    dist = getattr(point, "dist", None)
    origin = f" from the distribution {dist.metadata['Name']} {dist.version}" if dist is not None else ""
    return f"{point.name} = {point.value!r}{origin}"


def declared(group: str) -> dict[str, str]:
    """{entry-point name: source} of `group`, read from the installed metadata; nothing is imported."""
    return {point.name: source_of(point) for point in entry_points(group=group)}


def failure(err: BaseException) -> str:
    """An exception as one line: 'SyntaxError: invalid syntax (mod.py, line 3)'."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def left_out(what: str, plugin: str, group: str, why: str) -> None:
    """The one warning line for a plugin left out."""
    warn(f"the {what} plugin {plugin} ({group}) {why}; it is left out: fix or uninstall the package that declares it")
