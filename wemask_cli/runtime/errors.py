"""Errors written for users: the CLI prints their message on one line and exits 2."""


class WeMaskError(Exception):
    """A problem with the user's input or environment, with a message that says how to fix it."""


def first_line(err: BaseException, limit: int = 300) -> str:
    """An exception's first line, cut to `limit` characters (its type name when it says nothing), for a one-line error."""
    text = str(err).strip()
    return text.splitlines()[0][:limit] if text else type(err).__name__
