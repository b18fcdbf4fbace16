"""Libraries installed at versions wemask was not tested on: outside the release series `make test` ran (the record
in resources/environments.json) or, for a library whose internals wemask touches, outside the series its compat
module declares (compat/verified.py; that range holds the recorded ones, tests/test_compat.py). One warning line
once per command, and the line of a failure raised inside such a library, in place of a bug report. Torch-free."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wemask_cli.compat.verified import verified_ranges
from wemask_cli.resources import tested_environments
from wemask_cli.runtime import versions
from wemask_cli.runtime.progress import warn

_warned: list[str] = []  # the warning already given in this command (in this process, outside a command)


def tested_ranges() -> dict[str, tuple[str, str]]:
    """{library: (oldest, newest release series)}: the tested environments', a compat module's where it declares one."""
    return {**versions.tested_ranges(tested_environments()), **verified_ranges()}


def untested_versions() -> dict[str, tuple[str, str, str | None]]:
    """{library: (installed, tested series, pip requirement or None)} of the installed libraries outside their range."""
    ranges = tested_ranges()
    names = [*versions.TESTED_LIBRARIES, *(name for name in ranges if name not in versions.TESTED_LIBRARIES)]
    return versions.outside(versions.library_versions(names), ranges)


def describe(found: dict[str, tuple[str, str, str]]) -> str:
    """'accelerate 1.14.0 (tested 1.15), trl 1.15.0 (tested 1.16)'."""
    return ", ".join(f"{library} {have} (tested {tested})" for library, (have, tested, _) in found.items())


def install_hint(found: dict[str, tuple[str, str, str | None]]) -> str:
    """The pip command that installs the tested series of each library in `found` (a Python release: which to use)."""
    wanted = " ".join(f'"{requirement}"' for _, _, requirement in found.values() if requirement)
    python = found.get(versions.PYTHON)
    return " and ".join(([f"pip install {wanted}"] if wanted else []) + ([f"Python {python[1]}"] if python else []))


def warn_untested_versions() -> None:
    """One warning line when any library is at an untested version, once per command (`one_warning_per_command`; said
    as a command's work starts, once its inputs are checked), the command going on."""
    found = untested_versions()
    if not found or _warned:
        return
    _warned.append(describe(found))
    warn(f"untested versions: {describe(found)}: wemask may fail inside them; `{install_hint(found)}` installs the tested ones")


@contextmanager
def one_warning_per_command() -> Iterator[None]:
    """Around one command (cli.main): its untested-versions warning said at most once, and again by the next command."""
    _warned.clear()
    try:
        yield
    finally:
        _warned.clear()


LIBRARY_PACKAGES = {versions.import_name(library): library for library in versions.LIBRARIES[1:]}  # import name: library


def _packages_in(err: BaseException) -> list[str]:
    """The top-level package of each frame of `err`'s traceback, outermost first."""
    packages, tb = [], err.__traceback__
    while tb is not None:
        packages.append(str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0])
        tb = tb.tb_next
    return packages


def _found_while_failing() -> dict[str, tuple[str, str, str]]:
    """`untested_versions()` for a line about another failure, which must not fail itself: {} when it cannot tell."""
    try:
        return untested_versions()
    except Exception:  # reading the versions broke too: the traceback shows the first failure
        return {}


def failure_in_untested(err: BaseException) -> str | None:
    """The error line (after 'wemask: error: ') for an unexpected error raised inside a library's code (not wemask's
    or the user's) whose traceback runs through a library at an untested version (an old TRL beside an old
    accelerate): the error, the untested versions, the fix. None otherwise (a bug report, then)."""
    packages = _packages_in(err)
    if not packages or packages[-1] not in LIBRARY_PACKAGES:
        return None
    found = _found_while_failing()
    if not any(library.replace("-", "_") in packages for library in found):
        return None
    message = " ".join(str(err).split())[:300] or "(no message)"
    return (f"{type(err).__name__} inside {LIBRARY_PACKAGES[packages[-1]]}, with untested versions installed ({describe(found)}): "
            f"{message}; install the tested versions: {install_hint(found)}")


def bug_report_note(report: str) -> str:
    """`report` (the line asking for a bug report), with the untested versions named first when there are any."""
    found = _found_while_failing()
    if not found:
        return report
    return f"wemask: untested versions are installed ({describe(found)}): try `{install_hint(found)}` first; if it still fails: {report}"
