"""The layouts each training stage accepts, their detection, and per-row checks that name the row at fault.

Formats are declared per stage in `FORMATS` (first match wins); a stage that needs more (GRPO's answer column,
DPO's implicit prompt) adds or reads its own columns after detection. The verl layout is adapted in verl.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import WeMaskError


@dataclass(frozen=True)
class DataFormat:
    """A layout a stage accepts: the columns it needs, and whether other columns are kept."""

    name: str
    columns: tuple[str, ...]
    keep_other_columns: bool = False

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.columns)})"


FORMATS: dict[str, tuple[DataFormat, ...]] = {
    "sft": (
        DataFormat("messages", ("messages",)),
        DataFormat("prompt-completion", ("prompt", "completion")),
        DataFormat("text", ("text",)),
    ),
    "dpo": (
        DataFormat("prompt-chosen-rejected", ("prompt", "chosen", "rejected")),
        DataFormat("chosen-rejected (implicit prompt)", ("chosen", "rejected")),
    ),
    # GRPO keeps every column: reward functions receive them as keyword arguments (e.g. the reference answer).
    # The GSM8K layout (question, answer ending in '#### N') works as is: train/grpo.py turns question into prompt.
    "grpo": (
        DataFormat("prompt", ("prompt",), keep_other_columns=True),
        DataFormat("question-answer (GSM8K)", ("question", "answer"), keep_other_columns=True),
    ),
}


def is_conversation(value) -> bool:
    """A list of {'role', 'content'} messages (TRL's conversational form)."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def detect_format(stage: str, columns, where: str) -> DataFormat:
    """The first of the stage's formats whose columns are all present, or an error naming what was found."""
    if stage not in FORMATS:
        raise WeMaskError(f"no dataset formats are defined for stage {stage!r}")
    present = set(columns)
    for fmt in FORMATS[stage]:
        if set(fmt.columns) <= present:
            return fmt
    accepted = "; ".join(fmt.describe() for fmt in FORMATS[stage])
    raise WeMaskError(
        f"{where} has columns {sorted(present)}, which match no {stage} format: accepted are {accepted}. "
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
            if value is None or value == "" or value == []:
                raise WeMaskError(f"{where} {label} has no {column!r} (format {fmt.name} needs {needs})")
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
