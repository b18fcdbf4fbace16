"""`wemask eval`'s settings: every flag besides the model and the sweep axes (checked by tasks/resolve.py against the
task's declarations, before anything loads). Knows no task."""

from __future__ import annotations

from dataclasses import dataclass, fields

from wemask_cli.runtime.errors import WeMaskError

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
    options: dict | None = None  # the tasks' own flags given (TaskFlag.dest -> value), recorded as they are

    def option(self, dest: str):
        """A task flag's value (None: not given): a field here for the shared flags, else in `options`."""
        if dest in {f.name for f in fields(self)}:
            return getattr(self, dest)
        return (self.options or {}).get(dest)

    def seed_note(self, generates: bool) -> str:
        if not generates:
            return "nothing (deterministic task)"
        if self.seeds == 1 and not self.temperature:
            return "nothing (greedy decoding)"
        return f"sampling (temperature {self.temperature:g}, top_p {self.top_p:g}), seeds 0..{self.seeds - 1}"


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
