"""The eval tasks, one class each; `TASKS` maps a --task name to its class. Adding a task: one module, one line."""

from __future__ import annotations

from .base import Prepared, Scored, Task
from .choice import ChoiceTask
from .math import MathTask
from .perplexity import PerplexityTask
from .refusal import REFUSAL_PATTERNS, RefusalTask, refusal_match

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (PerplexityTask, ChoiceTask, MathTask, RefusalTask)}

__all__ = ["REFUSAL_PATTERNS", "TASKS", "ChoiceTask", "MathTask", "PerplexityTask", "Prepared", "RefusalTask", "Scored",
           "Task", "refusal_match"]
