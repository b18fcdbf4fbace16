"""mkdocs hooks: the pages and figures the site generates at build time, so that none is written by hand.

- reference/cli.md: every command and flag, walked from the Typer app's click tree;
- reference/recipe-keys.md: the training commands' flags that are also recipe keys;
- results/benchmarks.md: docs/results/bench.json (what `make bench` writes to runs/bench.json, with its record);
- the quick start's figures and figures: its commands are run (docs/doc_runs.py) and what they wrote is
  rendered into results/quickstart.md, with locate.png and report.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from doc_commands import ROOT, page_commands  # noqa: E402
from doc_runs import run_commands  # noqa: E402
from doc_tables import benchmarks_page, cli_page, quickstart_page, recipe_keys_page  # noqa: E402

QUICKSTART = HERE / "getting-started" / "quickstart.md"
QUICKSTART_RUN = ROOT / "runs" / "docs" / "quickstart"
FIGURES = {"locate.png": "runs/quickstart/locate.png", "report.png": "runs/quickstart/report.png"}


class QuickStartFailed(Exception):
    """A quick-start command exited non-zero: the build stops with its output."""


def quickstart() -> Path:
    """Run the quick start's commands (or reuse the run while nothing changed): the folder they ran in."""
    ran = run_commands([c for c in page_commands(QUICKSTART) if c.marker is None], QUICKSTART_RUN)
    failed = [r for r in ran if r.code != 0]
    if failed:
        raise QuickStartFailed(f"{failed[0].command.where()}: `{failed[0].command.text}` exited {failed[0].code}:\n{failed[0].output}")
    return QUICKSTART_RUN


def on_files(files, config):
    folder = quickstart()
    generated = {
        "reference/cli.md": cli_page(),
        "reference/recipe-keys.md": recipe_keys_page(),
        "results/benchmarks.md": benchmarks_page(json.loads((HERE / "results" / "bench.json").read_text())),
        "results/quickstart.md": quickstart_page(folder),
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    for name, relative in FIGURES.items():
        files.append(File.generated(config, f"assets/figures/{name}", abs_src_path=str(folder / relative)))
    return files
