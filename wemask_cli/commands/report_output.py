"""Where `wemask report` writes when no output is asked for: its own folder, `report/` beside the first run
directory (`runs/r0 runs/r0.3` -> `runs/report/`), claimed like any wemask output (outputs/): `report.png` and
`runs.json` (the run directories it read). A rerun of the same report (the same runs) replaces its own files
without --overwrite; a report of other runs there is replaced only with --overwrite; a file wemask did not write
there, never. `wemask report runs/*` skips that folder among its arguments."""

from __future__ import annotations

import os
from pathlib import Path

from wemask_cli.outputs import OURS, Manifest, OutputClaim, atomic_write_json, claim_output_dir, read_manifest
from wemask_cli.outputs.trained import read_object
from wemask_cli.runtime.errors import WeMaskError

REPORT_FOLDER = "report"
PLOT_FILE = "report.png"
RUNS_FILE = "runs.json"
FLAG = "the report's folder (the default of --plot)"


def default_folder(first_run: Path) -> Path:
    """`report/` beside the first run directory (never inside it, also for `wemask report .`)."""
    run = Path(os.path.normpath(first_run))
    if run.name in ("", ".", ".."):
        run = Path(os.path.abspath(run))
    return run.parent / REPORT_FOLDER


def is_report_folder(directory: Path) -> bool:
    """A folder wemask report wrote as its default output (its manifest lists runs.json)."""
    return RUNS_FILE in (read_manifest(directory) or [])


def run_list(directories: list[Path]) -> list[str]:
    return sorted(os.path.realpath(d) for d in directories)


def claim_default_output(directories: list[Path], overwrite: bool) -> tuple[Path, OutputClaim]:
    """The default plot's path and its folder, claimed: a report of the same runs is replaced without --overwrite,
    one of other runs with it; a folder holding anything else (a run named `report`, a user's file) is refused,
    --overwrite or not."""
    folder = default_folder(directories[0])
    earlier = read_object(folder / RUNS_FILE).get("runs") if is_report_folder(folder) else None
    if earlier is None and folder.is_dir() and set(os.listdir(folder)) - set(OURS):  # a run, or the user's folder
        raise WeMaskError(f"{folder} is not the folder of a wemask report (it holds other files): pass --plot PATH, or --no-plot")
    same = earlier == run_list(directories)
    if earlier is not None and not same and not overwrite:
        shown = ", ".join(os.path.relpath(run) for run in earlier[:3]) + (f" and {len(earlier) - 3} more" if len(earlier) > 3 else "")
        raise WeMaskError(f"{folder} holds the report of other runs ({shown}): pass --overwrite to replace it, or --plot PATH")
    kept = Manifest.read(folder).plan().kept if earlier is not None else []
    if kept:
        raise WeMaskError(f"{folder} also holds files wemask report did not write ({', '.join(kept[:3])}): move them away, or pass --plot PATH")
    claim = claim_output_dir(folder, overwrite=overwrite or same, kind="report", flag=FLAG)
    claim.plan = None  # the folder holds only the report's own files (checked): the new ones replace them in place
    return folder / PLOT_FILE, claim


def record_default_output(claim: OutputClaim, directories: list[Path]) -> Path:
    """After the plot is written: runs.json beside it, both recorded in the claimed folder's manifest."""
    runs = atomic_write_json(claim.path / RUNS_FILE, {"runs": run_list(directories)})
    claim.record(PLOT_FILE, RUNS_FILE)
    return runs
