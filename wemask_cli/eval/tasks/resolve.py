"""A task's settings checked against what its class declares, and its defaults filled in (before anything loads).

The tasks depend on the settings, never the other way: `wemask eval` (commands/eval.py) resolves the settings here
and hands them to `Task.create`.
"""

from __future__ import annotations

from dataclasses import fields, replace

from wemask_cli.eval.settings import DEFAULT_WINDOW, SAMPLING_TEMPERATURE, EvalSettings, check_numbers
from wemask_cli.eval.tasks.base import Task
from wemask_cli.eval.tasks.registry import applies_to, takes, task_class, task_flags
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.finite import check_temperature


def resolve(settings: EvalSettings, cls: type[Task] | None = None) -> EvalSettings:
    """Check the flags against what the task's class (`cls`, default --task's) declares, and fill in its defaults."""
    cls = cls or task_class(settings.task)
    check_numbers(settings)
    changes: dict = check_task_flags(settings, cls)
    if cls.generates:
        changes.update(generation_defaults(settings, cls))
    else:
        check_deterministic(settings)
    if cls.template is not None:
        template = settings.prompt_template or cls.template
        if "{question}" not in template:
            raise WeMaskError(f"--prompt-template {template!r} has no {{question}} placeholder")
        changes["prompt_template"] = template
    elif settings.prompt_template:
        raise WeMaskError(f"--prompt-template applies to {applies_to(lambda c: c.template is not None)}, not to {settings.task}")
    if settings.num_fewshot and not cls.fewshot:
        raise WeMaskError(f"--num-fewshot applies to {applies_to(lambda c: c.fewshot)}, not to {settings.task}")
    if settings.chat_template is None:
        changes["chat_template"] = cls.chat_default
    return replace(settings, **changes)


def check_deterministic(settings: EvalSettings) -> None:
    """A task that does not sample takes no --seeds and no --temperature."""
    if settings.seeds > 1:
        raise WeMaskError(
            f"--seeds {settings.seeds}: the {settings.task} task is deterministic (no sampling), every seed gives the same "
            "number; drop --seeds and read the standard error over examples (the 'se' column) as its spread"
        )
    if settings.temperature not in (None, 0):
        raise WeMaskError(f"--temperature applies to {applies_to(lambda c: c.generates)}, not to {settings.task}")


def check_task_flags(settings: EvalSettings, cls: type[Task]) -> dict:
    """Refuse a task flag the task does not take; the --window default (and --stride's range) of one that does.
    Returns the changes to the settings."""
    order = [field.name for field in fields(settings)]  # the shared flags in the settings' order, then the options
    for flag in sorted(task_flags(), key=lambda flag: order.index(flag.dest) if flag.dest in order else len(order)):
        if settings.option(flag.dest) is not None and not takes(cls, flag.dest):
            raise WeMaskError(f"{flag.name} applies to {applies_to(lambda c: takes(c, flag.dest))}, not to {settings.task}")
    if "window" not in cls.flags:
        return {}
    window = settings.window or cls.default_window or DEFAULT_WINDOW
    if settings.stride is not None and not 1 <= settings.stride <= window:
        raise WeMaskError(f"--stride {settings.stride} must be between 1 and --window ({window})")
    return {"window": window}


def generation_defaults(settings: EvalSettings, cls: type[Task]) -> dict:
    temperature = settings.temperature
    if temperature is None:
        temperature = SAMPLING_TEMPERATURE if settings.seeds > 1 else 0.0
    check_temperature(temperature)
    if settings.seeds > 1 and temperature == 0:
        raise WeMaskError(
            f"--seeds {settings.seeds} with --temperature 0: greedy decoding gives the same completions for every seed; "
            f"give a temperature > 0 (default {SAMPLING_TEMPERATURE} when --seeds > 1) or drop --seeds"
        )
    changes = {"temperature": float(temperature)}
    if settings.max_new_tokens is None:
        changes["max_new_tokens"] = cls.max_new_tokens
    return changes
