"""The eval tasks, one class each, found through the registry (registry.py: `@register`, the built-in modules and the
entry-point group `wemask.eval_tasks`). Adding a task: one module with a registered Task subclass."""

from __future__ import annotations

from .base import Prepared, Scored, Task
from .choice import ChoiceTask
from .lm_eval import LmEvalTask
from .math import MathTask
from .perplexity import PerplexityTask
from .refusal import REFUSAL_PATTERNS, RefusalTask, refusal_match
from .registry import register, task_class, tasks

__all__ = ["REFUSAL_PATTERNS", "ChoiceTask", "LmEvalTask", "MathTask", "PerplexityTask", "Prepared", "RefusalTask", "Scored",
           "Task", "refusal_match", "register", "task_class", "tasks"]
