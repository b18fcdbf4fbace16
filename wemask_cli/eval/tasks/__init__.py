"""The eval tasks, one class each, found through the registry (registry.py: `@register`, the built-in modules and the
entry-point group `wemask.eval_tasks`). Adding a task: one module with a registered Task subclass, which declares
its own flags (`options`). resolve.py checks a task's settings against its declarations."""

from __future__ import annotations

from wemask_cli.eval.tasks.base import Prepared, Scored, Task, TaskFlag
from wemask_cli.eval.tasks.choice import ChoiceTask
from wemask_cli.eval.tasks.diversity import DiversityTask
from wemask_cli.eval.tasks.lm_eval import LmEvalTask
from wemask_cli.eval.tasks.math import MathTask
from wemask_cli.eval.tasks.perplexity import PerplexityTask
from wemask_cli.eval.tasks.refusal import REFUSAL_PATTERNS, RefusalTask, refusal_match
from wemask_cli.eval.tasks.registry import register, task_class, tasks
from wemask_cli.eval.tasks.resolve import resolve

__all__ = ["REFUSAL_PATTERNS", "ChoiceTask", "DiversityTask", "LmEvalTask", "MathTask", "PerplexityTask", "Prepared", "RefusalTask", "Scored",
           "Task", "TaskFlag", "refusal_match", "register", "resolve", "task_class", "tasks"]
