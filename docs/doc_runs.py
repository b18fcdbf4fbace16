"""Running the documented commands (docs/doc_commands.py) in one work folder, as a user would type them.

The folder holds links to the checkout's `data/` and `recipes/`, so the pages' relative paths work; commands that
write `runs/...` write there. A finished folder is reused while the commands and wemask's sources are unchanged
(its `.key`), so the docs build and tests/test_docs.py share one run of the quick start. Torch-free.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from doc_commands import ROOT, DocCommand, page_commands

LINKED = ("data", "recipes")
QUICKSTART = ROOT / "docs" / "getting-started" / "quickstart.md"
QUICKSTART_RUN = ROOT / "runs" / "docs" / "quickstart"  # the folder the quick start's commands run in


@dataclass
class Ran:
    command: DocCommand
    code: int
    output: str  # stdout and stderr together


def sources_key(commands: list[DocCommand]) -> str:
    """A digest of the commands and of every wemask source file: what a run of them depends on."""
    digest = hashlib.sha256()
    for command in commands:
        digest.update(command.text.encode() + b"\0")
    for path in sorted((ROOT / "wemask_cli").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def prepare(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)


def run_one(command: DocCommand, folder: Path, timeout: int = 600) -> Ran:
    """One documented wemask command, as `python -m wemask_cli ARGS` in `folder` with this checkout's code."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run(
        [sys.executable, "-m", "wemask_cli", *command.wemask_args], cwd=folder, env=env, timeout=timeout,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return Ran(command, done.returncode, done.stdout)


def run_commands(commands: list[DocCommand], folder: Path) -> list[Ran]:
    """Run the commands in order in `folder` (stopping at the first failure), or reuse the last complete run."""
    key = sources_key(commands)
    record = folder / ".key"
    logs = folder / ".logs"
    if record.exists() and record.read_text() == key:
        return [Ran(c, 0, output) for c, output in zip(commands, logged(folder))]
    if folder.exists():
        shutil.rmtree(folder)
    prepare(folder)
    logs.mkdir()
    ran = []
    for i, command in enumerate(commands):
        ran.append(run_one(command, folder))
        (logs / f"{i}.log").write_text(ran[-1].output)
        if ran[-1].code != 0:
            return ran
    record.write_text(key)
    return ran


def logged(folder: Path) -> list[str]:
    """What each command of the last run in `folder` printed, in order."""
    logs = folder / ".logs"
    return [(logs / f"{i}.log").read_text() for i in range(len(list(logs.glob("*.log"))))]


class DocCommandFailed(Exception):
    """A documented command exited non-zero: its place in the docs, the command and what it printed."""


def quickstart() -> list[Ran]:
    """The quick start's commands, run in QUICKSTART_RUN (or reused while nothing changed); a failure raises."""
    ran = run_commands([c for c in page_commands(QUICKSTART) if c.marker is None], QUICKSTART_RUN)
    for result in ran:
        if result.code != 0:
            command = result.command
            raise DocCommandFailed(f"{command.where()}: `{command.text}` exited {result.code}:\n{result.output}")
    return ran
