"""mkdocs hooks: the pages and figures the site generates at build time, so that none is written by hand.

- reference/cli.md: every command and flag, walked from the Typer app's click tree;
- reference/recipe-keys.md: the training commands' flags that are also recipe keys;
- results/benchmarks.md: docs/results/bench.json (what `make bench` writes to runs/bench.json, with its record);
- results/quickstart.md and its figures (locate.png, report.png): the quick start's commands are run
  (docs/doc_runs.py, reused while nothing changed) and what they wrote is rendered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mkdocs.structure.files import File

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from doc_runs import QUICKSTART_RUN, quickstart  # noqa: E402
from doc_tables import benchmarks_page, cli_page, quickstart_page, recipe_keys_page  # noqa: E402

FIGURES = {"locate.png": "runs/quickstart/locate.png", "report.png": "runs/quickstart/report/report.png"}


def on_files(files, config):
    quickstart()
    folder = QUICKSTART_RUN
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
