"""The kinds of training data and the layouts each accepts, their detection, and per-row checks that name the row at
fault. The data layer names no stage: a stage declares the kind it reads in its StageSpec (train/stage_registry.py),
which names the data after the stage for its messages.

The kinds are SUPERVISED, PREFERENCE and PROMPTS (and unpaired.py's UNPAIRED), each a `TrainingData` (its formats,
first match wins). A stage that needs more (an answer column, an implicit prompt) adds or reads its own columns after
detection. The layouts recognised without flags (layouts.py: verl, Alpaca, ShareGPT, ...) convert for the `kind` a
TrainingData names.
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
    """A kind of training data: its formats (first match wins), and its `kind`, the key under which the layouts
    recognised without flags (layouts.py) declare how they convert for it, or None (no layout converts). `stage`, the
    stage reading it, is set by the stage's declaration (StageSpec) and named in errors."""

    formats: tuple[DataFormat, ...]
    kind: str | None = None
    hint: str = ""  # what else a stage reading it reads, said when no format matches (e.g. preference pairs)
    stage: str = ""

    def named(self, stage: str) -> TrainingData:
        """The same data as read by the stage `stage` (its name in the messages)."""
        return TrainingData(self.formats, self.kind, self.hint, stage)

    @property
    def reader(self) -> str:
        """Who reads it, for the messages: the stage, else the kind."""
        return self.stage or self.kind or "training"


SUPERVISED = TrainingData((
    DataFormat("messages", ("messages",)),
    DataFormat("prompt-completion", ("prompt", "completion")),
    DataFormat("text", ("text",)),
), "supervised")
PREFERENCE = TrainingData((
    DataFormat("prompt-chosen-rejected", ("prompt", "chosen", "rejected")),
    DataFormat("chosen-rejected (implicit prompt)", ("chosen", "rejected")),
), "preference")
# Every column is kept: reward functions receive them as keyword arguments (e.g. the reference answer).
# The GSM8K layout (question, answer ending in '#### N') works as is: train/grpo.py turns question into prompt.
PROMPTS = TrainingData((
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
    hint = f" {data.reader} reads {data.hint}." if data.hint else ""
    raise WeMaskError(
        f"{where} has columns {sorted(present)}, which match no {data.reader} format: accepted are {accepted}.{hint} "
        f"{rename_suggestion(data, list(columns))}"
    )


def rename_suggestion(data: TrainingData, columns: list[str]) -> str:
    """How --dataset-columns makes the closest format out of `columns`: its missing columns from the columns no
    format reads, in order (prompt=question,completion=answer); a general line where those are too few."""
    wanted = {name for fmt in data.formats for name in fmt.columns}
    spare = [name for name in columns if name not in wanted]

    def closeness(fmt: DataFormat) -> tuple:
        missing = [name for name in fmt.columns if name not in columns]
        return len(fmt.columns) - len(missing), len(missing) <= len(spare), len(missing) == len(spare), len(fmt.columns)

    closest = max(data.formats, key=closeness)  # the first of equally close ones
    missing = [name for name in closest.columns if name not in columns]
    nested = "dotted paths reach nested fields: answer=reward_model.ground_truth"
    if spare and len(missing) <= len(spare):
        pairs = ",".join(f"{ours}={theirs}" for ours, theirs in zip(missing, spare))
        return f"Rename columns with --dataset-columns {pairs} ({nested})"
    return f"Add the missing column(s) {', '.join(missing)} to the file, or rename with --dataset-columns OURS=THEIRS ({nested})"


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
            dataset = replace_column(dataset, column, values)
    return dataset


def replace_column(dataset, column: str, values: list):
    """`dataset` with the values of `column` replaced, the column kept in its place (also when it is the only one)."""
    if dataset.data.num_rows != dataset.num_rows:  # a selection of rows (an indices mapping): the column is per row
        dataset = dataset.flatten_indices()
    order, staged = dataset.column_names, f"{column}.replaced"
    dataset = dataset.add_column(staged, values).remove_columns([column]).rename_column(staged, column)
    return dataset.select_columns(order)


def _text_length(value) -> int:
    """The length of a value's longest text: plain text, or the longest message content of a conversation."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list) and is_conversation(value):
        return max((len(m["content"]) for m in value if isinstance(m.get("content"), str)), default=0)
    return 0


def _cut(value, limit: int):
    """The value with its text (a conversation: each message's content) cut to its first `limit` characters."""
    if isinstance(value, str):
        return value[:limit]
    return [{**m, "content": m["content"][:limit]} if isinstance(m.get("content"), str) else m for m in value]


def cut_long_texts(dataset, columns: tuple[str, ...], limit: int):
    """(dataset, rows cut, longest text) with every text of `columns` (plain text, or a message's content) longer
    than `limit` characters cut to its first `limit`; the dataset is unchanged when none is longer."""
    cut_rows, longest = set(), 0
    for column in columns:
        values = list(dataset[column])
        lengths = [_text_length(value) for value in values]
        long_rows = [index for index, length in enumerate(lengths) if length > limit]
        longest = max([longest, *lengths])
        if long_rows:
            for index in long_rows:
                values[index] = _cut(values[index], limit)
            dataset = replace_column(dataset, column, values)
            cut_rows.update(long_rows)
    return dataset, len(cut_rows), longest
