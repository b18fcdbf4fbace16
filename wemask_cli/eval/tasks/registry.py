"""The registry of eval tasks: `--task NAME` -> its class, torch-free (the CLI's help lists it).

Adding a task = one module with a `@register`ed Task subclass: a module of this package listed in BUILTIN, or any
installed module named under the entry-point group `wemask.eval_tasks` (pyproject:
`[project.entry-points."wemask.eval_tasks"] my_task = "my_pkg.my_task"`), imported the first time the tasks are read.
Settings, flags, data and the eval command read the classes' declarations; they never name a task.
"""

from __future__ import annotations

from dataclasses import fields

from wemask_cli.eval.settings import EvalSettings
from wemask_cli.eval.tasks.base import FLAG_TYPES, TASK_FLAGS, Task, TaskFlag
from wemask_cli.runtime.registry import Registry, RegistryError, origin

__all__ = ["TASKS", "TASK_FLAGS", "accepting", "applies_to", "declaring", "register", "takes", "task_class", "task_flags", "task_help",
           "tasks"]

SETTINGS = {field.name for field in fields(EvalSettings)}  # the generic eval settings: no option takes their names
BUILTIN = ("perplexity", "choice", "math", "refusal", "diversity", "lm_eval")  # modules of this package, in listing order


def check_declaration(cls: type[Task]) -> None:
    """A task's `flags` name shared flags (TASK_FLAGS); its own `options` parse and take no name a shared flag, a
    setting or another task's option has."""
    unknown = set(cls.flags) - set(TASK_FLAGS)
    if unknown:
        raise RegistryError(f"{cls.__name__} declares unknown flags {sorted(unknown)} (known: {sorted(TASK_FLAGS)})")
    for option in cls.options:
        if not isinstance(option, TaskFlag) or option.type not in FLAG_TYPES:
            raise RegistryError(f"{origin(cls)} declares the option {option!r}: a task's option is a TaskFlag of type "
                                "str, int, float or bool")
        owner = next((other for other in TASKS.registered().values() if other.name != cls.name
                      and option.dest in {o.dest for o in other.options}), None)
        if option.dest in TASK_FLAGS or option.dest in SETTINGS or owner is not None:
            taken = TASKS.source(owner.name) if owner is not None else "a shared eval flag (tasks.base.TASK_FLAGS, EvalSettings)"
            raise RegistryError(f"{origin(cls)} declares the option {option.name}, which is already {taken}")


TASKS: Registry[type[Task]] = Registry("eval task", "wemask.eval_tasks", Task, package=__package__, builtin=BUILTIN,
                                       flag="--task", check=check_declaration)
register = TASKS.register  # class decorator: make `cls` known as `--task cls.name`


def tasks() -> dict[str, type[Task]]:
    """Every registered task: the built-ins in BUILTIN's order, then the plugins'."""
    return TASKS.entries()


def task_class(name: str) -> type[Task]:
    return TASKS.get(name)


def accepting(test) -> list[str]:
    """The names of the tasks whose class passes `test` (for help and for 'applies to ...' errors)."""
    return [name for name, cls in tasks().items() if test(cls)]


def applies_to(test) -> str:
    """'the perplexity task' / 'the choice and math tasks', from the classes passing `test`."""
    names = accepting(test)
    if len(names) == 1:
        return f"the {names[0]} task"
    return f"the {', '.join(names[:-1])} and {names[-1]} tasks"


def task_flags() -> list[TaskFlag]:
    """Every task flag `wemask eval` offers: the shared ones (TASK_FLAGS), then the tasks' own options."""
    return [*TASK_FLAGS.values(), *(option for cls in tasks().values() for option in cls.options)]


def takes(cls: type[Task], dest: str) -> bool:
    """Whether the task takes the task flag `dest` (a shared flag it names, or one of its options)."""
    return dest in cls.flags or dest in {option.dest for option in cls.options}


def declaring(flag: TaskFlag) -> str:
    """'perplexity' / 'choice/math': the registered tasks that take `flag`, for its help."""
    return "/".join(accepting(lambda cls: takes(cls, flag.dest)))


def task_help() -> str:
    """--task's help: every registered task with its one-line summary."""
    return "; ".join(f"{name}: {cls.summary}" if cls.summary else name for name, cls in tasks().items()) + "."
