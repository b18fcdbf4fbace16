"""Runtime data ships inside the package (wemask_cli/resources) and is read with importlib.resources only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from wemask_cli import resources
from wemask_cli.runtime.errors import WeMaskError

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"


@pytest.mark.parametrize("name", ["locate_prompts.jsonl", "eval/perplexity.txt", "eval/choice.jsonl", "eval/math.jsonl", "eval/refusal.jsonl"])
def test_bundled_files_are_found_and_read(name):
    assert resources.path_of(name).is_file() and resources.read_text(name).strip()
    with resources.as_file(name) as path:
        assert isinstance(path, Path) and path.read_text(encoding="utf-8") == resources.read_text(name)


def test_a_missing_bundled_file_is_one_line():
    with pytest.raises(WeMaskError, match="the bundled file eval/nothing.jsonl is missing from the wemask_cli package"):
        resources.path_of("eval/nothing.jsonl")


def test_nothing_reads_files_beside_the_package_through___file__():
    """Files next to the package do not exist in an installed wheel: resources go through importlib.resources."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name) and node.id == "__file__"
    ]
    assert found == []
