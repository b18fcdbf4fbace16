"""The eval tasks, one class each, found through the registry (registry.py: `@register`, the built-in modules and the
entry-point group `wemask.eval_tasks`). Adding a task: one module with a registered Task subclass, which declares
its own flags (`options`). resolve.py checks a task's settings against its declarations."""

from __future__ import annotations

from .base import Prepared, Scored, Task, TaskFlag
from .choice import ChoiceTask
from .lm_eval import LmEvalTask
from .math import MathTask
from .perplexity import PerplexityTask
from .refusal import REFUSAL_PATTERNS, RefusalTask, refusal_match
from .registry import register, task_class, tasks
from .resolve import resolve

__all__ = ["REFUSAL_PATTERNS", "ChoiceTask", "LmEvalTask", "MathTask", "PerplexityTask", "Prepared", "RefusalTask", "Scored",
           "Task", "TaskFlag", "refusal_match", "register", "resolve", "task_class", "tasks"]
