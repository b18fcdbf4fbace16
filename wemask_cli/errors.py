"""Errors written for users: the CLI prints their message on one line and exits 2."""


class WeMaskError(Exception):
    """A problem with the user's input or environment, with a message that says how to fix it."""
