"""The standard library's argparse internals wemask touches. Verified on Python 3.10-3.13.

`ArgumentParser._actions`, the parser's list of declared arguments: train/resolve.py parses TRL's flags with
transformers' HfArgumentParser (an argparse parser built from the config dataclass) and needs, for the run record,
which flags were given rather than defaulted; argparse has no such query and no public list of its actions, so the
actions' defaults are suppressed for one parse and restored after.
"""

from __future__ import annotations

import argparse

from wemask_cli.compat import require

LIBRARY = "python"
VERIFIED = {LIBRARY: ("3.10", "3.13")}  # the Python releases this module was verified on
FIELDS = ("dest", "default", "required", "type", "nargs", "const")  # what resolve.py reads and sets on an action


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every argument `parser` declares, checked to be argparse actions with the fields resolve.py uses."""
    actions = require(LIBRARY, parser, "_actions", kind=list, verified=VERIFIED)
    for action in actions[:1]:
        for name in FIELDS:
            require(LIBRARY, action, name, verified=VERIFIED)
    return actions


def check() -> None:
    """The canary (tests/test_compat.py): a parser with one argument lists it, with its fields."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--probe", type=int, default=3)
    if [action.dest for action in parser_actions(parser)] != ["probe"]:
        from wemask_cli.compat import incompatible

        raise incompatible(LIBRARY, "ArgumentParser._actions no longer lists the declared arguments", VERIFIED)
