"""Under CI=true a test that skips because an optional package cannot be imported fails instead (tests/ci_skips.py),
at collection (a module-level importorskip) and inside a test; without CI=true it skips as usual."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PLANTED = '''
import pytest

def test_inside():
    pytest.importorskip("wemask_no_such_backend")

def test_plain_skip():
    pytest.skip("a GPU is needed")
'''
PLANTED_MODULE = 'import pytest\npytest.importorskip("wemask_no_such_backend")\n\ndef test_never():\n    pass\n'


def run_planted(tmp_path: Path, name: str, source: str, ci: str) -> subprocess.CompletedProcess:
    (tmp_path / name).write_text(source)
    env = {**os.environ, "CI": ci, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "ci_skips", "-p", "no:cacheprovider", name]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci, expected", [("true", "1 failed, 1 skipped"), ("false", "2 skipped")])
def test_missing_backend_in_a_test_fails_only_under_ci(tmp_path, ci, expected):
    done = run_planted(tmp_path, "test_inside.py", PLANTED, ci)
    assert expected in done.stdout, done.stdout
    assert (done.returncode != 0) == (ci == "true")
    assert ("CI=true and an optional back-end is missing" in done.stdout) == (ci == "true")


@pytest.mark.parametrize("ci", ["true", "false"])
def test_missing_backend_at_collection_fails_only_under_ci(tmp_path, ci):
    done = run_planted(tmp_path, "test_module.py", PLANTED_MODULE, ci)
    if ci == "true":
        assert done.returncode != 0 and "CI=true and an optional back-end is missing" in done.stdout, done.stdout
    else:
        assert done.returncode in (0, 5) and "1 skipped" in done.stdout, done.stdout  # 5: nothing ran
