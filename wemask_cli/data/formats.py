"""The layouts each training stage accepts, their detection, and per-row checks that name the row at fault.

A stage declares what it reads as a `TrainingData` (its formats, first match wins; train/stage_registry.py): the
built-in stages use SUPERVISED, PREFERENCE and PROMPTS (and unpaired.py's UNPAIRED). A stage that needs more (GRPO's
answer column, DPO's implicit prompt) adds or reads its own columns after detection. The layouts recognised without
flags (layouts.py: verl, Alpaca, ShareGPT, ...) convert for the `kind` a TrainingData names.
"""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.runtime.errors import WeMaskError


@dataclass(frozen=True)
class DataFormat:
    """A layout a stage accepts: the columns it needs, and whether other columns are kept."""

    name: str
    columns: tuple[str, ...]
    keep_other_columns: bool = False

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.columns)})"


@dataclass(frozen=True)
class TrainingData:
    """What a training stage reads: its formats (first match wins), and its `kind`, the key under which the layouts
    recognised without flags (layouts.py) declare how they convert for it, or None (no layout converts)."""

    stage: str  # named in errors
    formats: tuple[DataFormat, ...]
    kind: str | None = None

    def named(self, stage: str) -> TrainingData:
        """The same data under another stage's name (a stage that reads what a built-in one reads)."""
        return TrainingData(stage, self.formats, self.kind)


SUPERVISED = TrainingData("sft", (
    DataFormat("messages", ("messages",)),
    DataFormat("prompt-completion", ("prompt", "completion")),
    DataFormat("text", ("text",)),
), "supervised")
PREFERENCE = TrainingData("dpo", (
    DataFormat("prompt-chosen-rejected", ("prompt", "chosen", "rejected")),
    DataFormat("chosen-rejected (implicit prompt)", ("chosen", "rejected")),
), "preference")
# Every column is kept: reward functions receive them as keyword arguments (e.g. the reference answer).
# The GSM8K layout (question, answer ending in '#### N') works as is: train/grpo.py turns question into prompt.
PROMPTS = TrainingData("grpo", (
    DataFormat("prompt", ("prompt",), keep_other_columns=True),
    DataFormat("question-answer (GSM8K)", ("question", "answer"), keep_other_columns=True),
), "prompts")
def is_conversation(value) -> bool:
    """A list of {'role', 'content'} messages (TRL's conversational form)."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def detect_format(data: TrainingData, columns, where: str) -> DataFormat:
    """The first of the data's formats whose columns are all present, or an error naming what was found."""
    present = set(columns)
    for fmt in data.formats:
        if set(fmt.columns) <= present:
            return fmt
    accepted = "; ".join(fmt.describe() for fmt in data.formats)
    raise WeMaskError(
        f"{where} has columns {sorted(present)}, which match no {data.stage} format: accepted are {accepted}. "
        "Rename columns with --dataset-columns, e.g. prompt=question,completion=answer (dotted paths reach nested "
        "fields: answer=reward_model.ground_truth)"
    )


def _message_problem(messages: list) -> str | None:
    for number, message in enumerate(messages, 1):
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"message {number} has content {content!r} ({type(content).__name__}), not text"
    return None


def text_problem(value) -> str | None:
    """Why a value is not text or a conversation (None if it is; 'integer' for an int, which converts exactly)."""
    if isinstance(value, str):
        return None
    if isinstance(value, bool):
        return f"is a boolean ({value}), not text"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return f"is a number ({value!r}), not text: write it as a string in the file"
    if isinstance(value, list):
        if not is_conversation(value):
            return "is a list but not a conversation of {'role', 'content'} messages"
        return _message_problem(value)
    kind = "an object with named fields" if isinstance(value, dict) else f"a {type(value).__name__}"
    return f"is {kind}, not text or a conversation of {{'role', 'content'}} messages"


def check_rows(dataset, fmt: DataFormat, labels: list[str] | None, where: str):
    """The dataset with every format column filled with text or conversations (integers become their digits).

    Anything else (empty, a float, a boolean, an object, a list that is not a conversation) is one error line
    naming the row (its line for JSON lines and CSV) and the column.
    """
    needs = ", ".join(fmt.columns)
    for column in fmt.columns:
        values, converted = list(dataset[column]), False
        for index, value in enumerate(values):
            label = labels[index] if labels else f"row {index + 1}"
            if value is None:
                raise WeMaskError(f"{where} {label} has no {column!r} (format {fmt.name} needs {needs})")
            if value == "" or value == []:
                raise WeMaskError(f"{where} {label}: {column!r} is empty (format {fmt.name} needs {needs})")
            problem = text_problem(value)
            if problem == "integer":
                values[index], converted = str(value), True
            elif problem:
                raise WeMaskError(f"{where} {label}: {column!r} {problem} (format {fmt.name} needs {needs})")
        if converted:
            position = dataset.column_names.index(column)
            dataset = dataset.remove_columns([column]).add_column(column, values)
            order = dataset.column_names[:position] + [column] + dataset.column_names[position:-1]
            dataset = dataset.select_columns(order)
    return dataset
