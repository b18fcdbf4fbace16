"""`wemask eval`'s settings: every flag besides the model and the sweep axes, checked before anything loads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import WeMaskError
from ..finite import check_temperature

SAMPLING_TEMPERATURE = 0.7
DEFAULT_WINDOW = 256
DEFAULT_FEWSHOT_SEED = 1234


@dataclass
class EvalSettings:
    """The eval flags (None: the task's default). `batch_size` is a number or 'auto' (resolved once the model loads)."""

    task: str | None
    data: str | None = None
    split: str | None = None
    data_config: str | None = None
    text_field: str | None = None
    question_field: str | None = None
    choices_field: str | None = None
    answer_field: str | None = None
    window: int | None = None  # perplexity: DEFAULT_WINDOW
    stride: int | None = None
    limit: int | None = None
    batch_size: int | str = 8
    max_new_tokens: int | None = None
    seeds: int = 1
    temperature: float | None = None
    top_p: float = 1.0
    prompt_template: str | None = None
    chat_template: bool | None = None
    num_fewshot: int = 0
    fewshot_seed: int = DEFAULT_FEWSHOT_SEED

    def task_class(self):
        from .tasks.registry import task_class

        return task_class(self.task)

    def resolved(self, cls=None) -> "EvalSettings":
        """Check the flags against what the task's class (`cls`, default --task's) declares, and fill in its defaults."""
        from .tasks.registry import applies_to

        cls = cls or self.task_class()
        check_numbers(self)
        changes: dict = check_task_flags(self, cls)
        if cls.generates:
            changes.update(generation_defaults(self, cls))
        else:
            if self.seeds > 1:
                raise WeMaskError(
                    f"--seeds {self.seeds}: the {self.task} task is deterministic (no sampling), every seed gives the same "
                    "number; drop --seeds and read the standard error over examples (the 'se' column) as its spread"
                )
            if self.temperature not in (None, 0):
                raise WeMaskError(f"--temperature applies to {applies_to(lambda c: c.generates)}, not to {self.task}")
        if cls.template is not None:
            template = self.prompt_template or cls.template
            if "{question}" not in template:
                raise WeMaskError(f"--prompt-template {template!r} has no {{question}} placeholder")
            changes["prompt_template"] = template
        elif self.prompt_template:
            raise WeMaskError(f"--prompt-template applies to {applies_to(lambda c: c.template is not None)}, not to {self.task}")
        if self.num_fewshot and not cls.fewshot:
            raise WeMaskError(f"--num-fewshot applies to {applies_to(lambda c: c.fewshot)}, not to {self.task}")
        if self.chat_template is None:
            changes["chat_template"] = cls.chat_default
        return replace(self, **changes)

    def seed_note(self, generates: bool) -> str:
        if not generates:
            return "nothing (deterministic task)"
        if self.seeds == 1 and not self.temperature:
            return "nothing (greedy decoding)"
        return f"sampling (temperature {self.temperature:g}, top_p {self.top_p:g}), seeds 0..{self.seeds - 1}"


def check_task_flags(settings: EvalSettings, cls) -> dict:
    """Refuse a task-specific flag the task does not declare; the --window default (and --stride's range) of one that
    does. Returns the changes to the settings."""
    from .tasks.base import TASK_FLAGS
    from .tasks.registry import applies_to

    for name, flag in TASK_FLAGS.items():
        if getattr(settings, name) is not None and name not in cls.flags:
            raise WeMaskError(f"{flag} applies to {applies_to(lambda c: name in c.flags)}, not to {settings.task}")
    if "window" not in cls.flags:
        return {}
    window = settings.window or cls.default_window or DEFAULT_WINDOW
    if settings.stride is not None and not 1 <= settings.stride <= window:
        raise WeMaskError(f"--stride {settings.stride} must be between 1 and --window ({window})")
    return {"window": window}


def parse_batch_size(value) -> int | str:
    """'auto' or a positive integer (from the command line's text)."""
    if isinstance(value, int) or value == "auto":
        return value
    try:
        return int(str(value))
    except ValueError:
        raise WeMaskError(f"--batch-size {value!r} is not valid: give a number of sequences or 'auto'") from None


def check_numbers(settings: EvalSettings) -> None:
    if settings.seeds < 1:
        raise WeMaskError("--seeds must be at least 1")
    if settings.batch_size != "auto" and settings.batch_size < 1:
        raise WeMaskError("--batch-size must be at least 1 (or 'auto')")
    if settings.window is not None and settings.window < 2:
        raise WeMaskError("--window must be at least 2 tokens")
    if settings.limit is not None and settings.limit < 1:
        raise WeMaskError("--limit must be at least 1")
    if settings.max_new_tokens is not None and settings.max_new_tokens < 1:
        raise WeMaskError("--max-new-tokens must be at least 1")
    if not 0 < settings.top_p <= 1:
        raise WeMaskError("--top-p must be in (0, 1]")
    if settings.num_fewshot < 0:
        raise WeMaskError("--num-fewshot must be 0 or more")


def generation_defaults(settings: EvalSettings, cls) -> dict:
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
