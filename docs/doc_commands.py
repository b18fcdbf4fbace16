"""The commands the documentation shows, read from its ```console blocks (README.md and docs/**/*.md).

A block holds `$ command` lines (a trailing backslash continues one) and, under each, lines of what it prints
(`...` stands for lines left out). A block inside an admonition says how the tests treat its commands:

    !!! gpu-only "GPU only: why it cannot run on a CPU"     parsed with the real command, never run
    !!! tested-by "tests/test_x.py: what that test runs"    parsed here, run by the test named (a file in tests/)
    !!! not-run "why: e.g. it installs packages"            `make`/`pip` lines, checked against Makefile/pyproject

On a page GitHub renders (README.md), the same marker is a comment line before the block, with the reason
also said in the text: `<!-- not-run "installs packages" -->`.

Any other block is run by tests/test_docs.py, in order, one folder per page. The docs build (docs/hooks.py)
runs the quick start's commands to draw its figures. Torch-free.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKERS = ("gpu-only", "tested-by", "not-run")
ADMONITION = re.compile(r'^(?:!!!|\?\?\?\+?) ([\w-]+)(?: "(.*)")?\s*$')
COMMENT = re.compile(r'^<!-- ([\w-]+) "(.*)" -->$')


@dataclass
class DocCommand:
    """One `$ ...` line of a console block: where it is, what it runs, what the page says it prints."""

    page: str  # relative to the repository root
    line: int
    text: str  # the command, continuation lines joined
    output: list[str] = field(default_factory=list)
    marker: str | None = None  # one of MARKERS, or None: run by the tests
    reason: str = ""

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def wemask_args(self) -> list[str] | None:
        """The arguments given to wemask (`wemask ARGS`, `... -m wemask_cli ARGS`), or None for another program."""
        argv = self.argv
        for i, word in enumerate(argv):
            if word == "wemask":
                return argv[i + 1 :]
            if word == "-m" and i + 1 < len(argv) and argv[i + 1] == "wemask_cli":
                return argv[i + 2 :]
        return None

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md, CONTRIBUTING.md (the site includes it) and every page of the site."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_commands(path: Path) -> list[DocCommand]:
    """The commands of one page, in order."""
    found: list[DocCommand] = []
    marker = (None, "")
    block = None  # the marker of the console block being read, or None outside one
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if block is None and raw and not raw.startswith(" ") and not stripped.startswith("```"):
            said = ADMONITION.match(raw) or COMMENT.match(raw)
            marker = (said.group(1), said.group(2) or "") if said and said.group(1) in MARKERS else (None, "")
        if stripped.startswith("```"):
            block = marker if block is None and stripped.startswith("```console") else None
        elif block is not None:
            _read_block_line(found, stripped, path, number, *block)
    return found


def _read_block_line(found: list[DocCommand], line: str, path: Path, number: int, marker, reason: str) -> None:
    continuing = found and found[-1].text.endswith("\\") and not found[-1].output
    if continuing:
        found[-1].text = found[-1].text[:-1].rstrip() + " " + line
    elif line.startswith("$ "):
        found.append(DocCommand(str(path.relative_to(ROOT)), number, line[2:].strip(), marker=marker, reason=reason))
    elif line and found:
        found[-1].output.append(line)


def all_commands() -> list[DocCommand]:
    return [command for path in pages() for command in page_commands(path)]
