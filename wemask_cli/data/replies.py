"""Replies with nothing in them: a conversation whose assistant turns are all empty trains on the prompt alone.

Every row empty is refused (there is no training signal); some rows empty is one warning naming the first of them.
A reply column is a conversation (`messages`, or `completion`/`chosen`/`rejected` as lists of messages): its
assistant turns' text, or for a completion, chosen or rejected conversation every turn's. Text cells that are empty
are refused row by row already (formats.check_rows).
"""

from __future__ import annotations

from wemask_cli.data.formats import DataFormat, is_conversation
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import warn

REPLY_COLUMNS = ("messages", "completion", "chosen", "rejected")
SHOWN_ROWS = 5


def _content_text(content) -> str:
    """A message's text: its string, or the text parts of a list of parts ({"type": "text", "text": ...})."""
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def reply_is_empty(value, column: str) -> bool:
    """A conversation cell whose replies (the assistant turns of `messages`, every turn of a completion) hold no text."""
    if not is_conversation(value):
        return False
    turns = [m for m in value if m.get("role") == "assistant"] if column == "messages" else value
    return not any(_content_text(m.get("content")).strip() for m in turns)


def check_replies(dataset, fmt: DataFormat, labels: list[str] | None, where: str) -> None:
    """Refuse data whose every reply is empty; warn, naming the first rows, when some are."""
    for column in (c for c in fmt.columns if c in REPLY_COLUMNS):
        empty = [index for index, value in enumerate(dataset[column]) if reply_is_empty(value, column)]
        if not empty:
            continue
        shown = ", ".join(labels[i] if labels else f"row {i + 1}" for i in empty[:SHOWN_ROWS])
        shown += f", ... ({len(empty)} in all)" if len(empty) > SHOWN_ROWS else ""
        if len(empty) == len(dataset):
            raise WeMaskError(
                f"{where}: every {column!r} reply is empty ({shown}): there is no training signal; write the "
                "assistant's replies into the file"
            )
        warn(f"{where}: {len(empty)} of {len(dataset)} examples have an empty {column!r} reply ({shown}); they train "
             "on the prompt alone: fill them in or drop those rows")
