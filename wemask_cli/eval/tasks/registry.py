"""The registry of eval tasks: `--task NAME` -> its class, torch-free (the CLI's help lists it).

Adding a task = one module with a `@register`ed Task subclass: a module of this package listed in BUILTIN, or any
installed module named under the entry-point group `wemask.eval_tasks` (pyproject:
`[project.entry-points."wemask.eval_tasks"] my_task = "my_pkg.my_task"`), imported the first time the tasks are read.
Settings, flags, data and the eval command read the classes' declarations; they never name a task.
"""

from __future__ import annotations

import importlib

from ...errors import WeMaskError
from ...plugins import load_plugins, name_taken
from .base import TASK_FLAGS, Task

__all__ = ["TASK_FLAGS", "TASKS", "accepting", "applies_to", "register", "task_class", "task_help", "tasks"]

TASKS: dict[str, type[Task]] = {}
BUILTIN = ("perplexity", "choice", "math", "refusal", "lm_eval")  # modules of this package, in listing order
PLUGIN_GROUP = "wemask.eval_tasks"  # entry points naming modules that register more tasks


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make `cls` known as `--task cls.name`."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} has no name")
    unknown = set(cls.flags) - set(TASK_FLAGS)
    if unknown:
        raise TypeError(f"{cls.__name__} declares unknown flags {sorted(unknown)} (known: {sorted(TASK_FLAGS)})")
    if cls.name in TASKS:
        name_taken("eval task", cls.name, TASKS[cls.name], cls)
    TASKS[cls.name] = cls
    return cls


def _load_tasks() -> None:
    """Import the built-in tasks, and once per process the plugins' (entry-point group `wemask.eval_tasks`):
    importing a plugin's module registers its tasks."""
    for name in BUILTIN:
        importlib.import_module(f".{name}", __package__)
    load_plugins(PLUGIN_GROUP, "eval task", TASKS)


def tasks() -> dict[str, type[Task]]:
    """Every registered task: the built-ins in BUILTIN's order, then the plugins'."""
    _load_tasks()
    builtin = [cls.name for module in BUILTIN for cls in TASKS.values() if cls.__module__ == f"{__package__}.{module}"]
    return {name: TASKS[name] for name in builtin + [name for name in TASKS if name not in builtin]}


def task_class(name: str) -> type[Task]:
    known = tasks()
    if name not in known:
        raise WeMaskError(f"--task {name!r} is unknown: use one of {', '.join(known)}")
    return known[name]


def accepting(test) -> list[str]:
    """The names of the tasks whose class passes `test` (for help and for 'applies to ...' errors)."""
    return [name for name, cls in tasks().items() if test(cls)]


def applies_to(test) -> str:
    """'the perplexity task' / 'the choice and math tasks', from the classes passing `test`."""
    names = accepting(test)
    if len(names) == 1:
        return f"the {names[0]} task"
    return f"the {', '.join(names[:-1])} and {names[-1]} tasks"


def task_help() -> str:
    """--task's help: every registered task with its one-line summary."""
    return "; ".join(f"{name}: {cls.summary}" if cls.summary else name for name, cls in tasks().items()) + "."
