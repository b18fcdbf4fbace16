"""Plugins: what other packages declare under wemask's entry-point groups (`wemask.interventions`, `wemask.stages`,
`wemask.eval_tasks`), loaded once per process; a plugin that cannot be loaded is one warning line and is left out,
so the CLI still starts. Imports nothing heavy."""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

from .progress import warn


@functools.cache
def load_plugins(group: str, what: str) -> tuple[tuple[str, object], ...]:
    """(entry-point name, loaded object) for every entry point of `group` that loads; `what` names the plugin kind
    in the warning ("intervention", "trainer stage", "eval task")."""
    loaded = []
    for point in entry_points(group=group):
        try:
            loaded.append((point.name, point.load()))
        except (ImportError, AttributeError) as err:
            left_out(what, f"{point.name} = {point.value!r}", group, f"cannot be loaded: {err}")
    return tuple(loaded)


def left_out(what: str, plugin: str, group: str, why: str) -> None:
    """The one warning line for a plugin left out."""
    warn(f"the {what} plugin {plugin} ({group}) {why}; it is left out: fix or uninstall the package that declares it")
