"""Under CI=true a missing optional back-end fails the run instead of skipping its tests: an `importorskip`
(DeepSpeed, lm-eval, bitsandbytes, math-verify, vLLM, or any other) that cannot import turns its skip, at
collection or in a test, into a failure naming the package. Loaded by conftest as a pytest plugin."""

from __future__ import annotations

import os

import pytest

IMPORT_SKIP = "could not import"  # how pytest.importorskip words its skip


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_reason(report) -> str:
    """The reason of a skipped report ('' when it did not skip)."""
    if not report.skipped:
        return ""
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def refuse(report) -> None:
    """Turn the skip of a missing package into a failure under CI=true."""
    reason = skip_reason(report)
    if under_ci() and IMPORT_SKIP in reason:
        report.outcome = "failed"
        report.longrepr = f"CI=true and an optional back-end is missing ({reason}): `make install` installs it"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    refuse(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    refuse(outcome.get_result())
