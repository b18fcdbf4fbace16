"""Plugins in tests: a site folder holding an installed distribution's metadata that declares one entry point, as
installing a plugin package leaves, and `wemask ARGS` in a fresh process with that folder (and tests/) on the path.
Used by the stage, intervention and eval-task plugin tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_startup import RUN_BLOCKED

TESTS = Path(__file__).resolve().parent
RUN = "from wemask_cli.cli import main; import sys; sys.argv[0] = 'wemask'; main()"
END = "-- wemask exited with"  # after each command of RUN_EACH, on stdout and stderr: END CODE
RUN_EACH = f"""
import json, sys
from wemask_cli.cli import main
for args in json.loads(sys.argv[1]):
    sys.argv = ["wemask", *args]
    code = 0
    try:
        main()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    for stream in (sys.stdout, sys.stderr):
        print("\\n{END}", code, file=stream, flush=True)
"""


def plugin_site(folder: Path, group: str, entry: str) -> Path:
    """`folder`, holding the metadata of a distribution that declares `entry` ('name = module[:attr]') in `group`."""
    return plugins_site(folder, {group: [entry]})


def plugins_site(folder: Path, groups: dict[str, list[str]], modules: dict[str, str] | None = None) -> Path:
    """`folder`, holding the metadata of the distribution wemask-toy-plugin 0.1 that declares the entries of each
    group, and the plugin `modules` ({name: source}) it installs."""
    dist = folder / "wemask_toy_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: wemask-toy-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("".join(f"[{group}]\n" + "".join(f"{e}\n" for e in entries)
                                                   for group, entries in groups.items()))
    for name, source in (modules or {}).items():
        (folder / f"{name}.py").write_text(source)
    return folder


def wemask(site: Path | None, *args: str, blocked: bool = False, cwd=None) -> subprocess.CompletedProcess:
    """`wemask ARGS` in a fresh process, tests/ (and the plugin's `site`, when given) on the path; `blocked`: with
    torch and the other heavy libraries unimportable (test_startup.RUN_BLOCKED)."""
    paths = [str(site), str(TESTS)] if site else [str(TESTS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]), "COLUMNS": "200"}
    code = RUN_BLOCKED if blocked else RUN
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600, cwd=cwd)


def wemask_each(site: Path, *commands: list[str]) -> list[tuple[int, str, str]]:
    """Each command as `wemask ARGS`, all in one fresh process (one start-up), the plugin's `site` and tests/ on the
    path: (exit code, stdout, stderr) per command."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(TESTS), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", RUN_EACH, json.dumps(commands)], capture_output=True, text=True, env=env, timeout=600)
    outs, errs = (each_output(text, len(commands), done.stderr) for text in (done.stdout, done.stderr))
    return [(code, out, err) for (code, out), (_, err) in zip(outs, errs)]


def each_output(text: str, count: int, stderr: str) -> list[tuple[int, str]]:
    """RUN_EACH's stdout or stderr cut at each END line: (exit code, what the command wrote) per command."""
    chunks = text.split(f"\n{END} ")  # the first command's text, then per command: its code, the next one's text
    assert len(chunks) == count + 1, stderr[-3000:]
    results, written = [], chunks[0]
    for chunk in chunks[1:]:
        code, _, after = chunk.partition("\n")
        results.append((int(code), written))
        written = after
    return results
