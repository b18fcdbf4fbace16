"""`wemask report DIR...`: gather the metrics.json of any number of runs into one table, one plot, JSON/CSV.

Each DIR contributes its own metrics.json and those of its immediate sub-directories (so an eval output
written inside a training run is found too); a DIR without any is skipped with one line. Two layouts are read:
- eval (wemask_cli/eval): a `results` list of {mask_rate, mode, quantize, seed, metric, value, se, n}; seeds are
  averaged (mean, std across seeds). Metric names become `<task>/<metric>` (`perplexity` stays `perplexity`).
  Its `summary` adds the paired change from r = 0 (PAIRED_COLUMNS: delta, the bootstrap 95% interval, p-value, test).
- a training run (sft, dpo, grpo): a flat object with `stage`, `mode`, `mask_rate` and numeric metrics, top level
  or under `metrics` (one level of nested dicts is flattened as `parent/key`); bookkeeping numbers (seed, steps,
  epoch, throughput, ...) are not metrics. Its wemask_run.json adds the settings metrics.json lacks.
Runs are compared like with like (report_settings.py): an eval of a training run by that run's training setting; a
line is one setting over the mask rate, a run without a mask its r = 0 (plain) point; runs of one setting differ in
seed alone and are averaged, the std across seeds their spread (never across duplicates of one seed).
Rows are long: one per run, line, mask rate and metric, with the columns in COLUMNS.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from wemask_cli.commands.report_output import claim_default_output, is_report_folder
from wemask_cli.commands.report_settings import eval_settings, line_names, read_run_record, training_settings
from wemask_cli.commands.report_stale import replaced_run_note
from wemask_cli.outputs import METRICS_FILE, OutputClaim, atomic_write_json, atomic_write_text, check_output_file
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say

NOT_METRICS = {
    "mask_rate", "me_layer", "strength", "seed", "seeds", "world_size", "global_step", "epoch", "runtime_s", "version",
    "n_examples", "mean_step_time_s", "train_samples_per_second", "train_steps_per_second", "reward_weights",
    "dropped_examples", "diagnostics_probe",
}
SETTING_COLUMNS = ["mode", "training", "quantize", "model", "train_data", "data", "eval_data", "peft", "ref_mask", "remedies"]
PAIRED_COLUMNS = ["delta", "paired_ci95_low", "paired_ci95_high", "p_value", "test"]  # an eval's change from r = 0
COLUMNS = ["run", "stage", "task", "line", *SETTING_COLUMNS, "seed", "mask_rate", "metric", "value", "std", "se", "seeds", "n",
           *PAIRED_COLUMNS]


def find_metrics(directory: Path) -> list[Path]:
    directory = Path(directory)
    if not directory.exists():
        raise WeMaskError(f"{directory}: no such directory")
    found = [directory / METRICS_FILE] if (directory / METRICS_FILE).is_file() else []
    return found + sorted(p for p in directory.glob(f"*/{METRICS_FILE}") if p.is_file())


def read_document(path: Path) -> dict:
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WeMaskError(f"{path} cannot be read as JSON ({getattr(err, 'msg', err)})") from None
    if not isinstance(document, dict):
        raise WeMaskError(f"{path} is not a JSON object")
    return document


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def result_rows(document: dict, path: Path) -> list[tuple[dict, dict]]:
    """(settings, row) pairs of one metrics.json (see the module doc for the two layouts); rows lack `run` and `line`."""
    if isinstance(document.get("results"), list):
        return eval_rows(document, path)
    missing = [key for key in ("stage", "mask_rate") if key not in document]
    if missing:
        raise WeMaskError(f"{path} has no {' or '.join(repr(k) for k in missing)}: it is not a wemask metrics file")
    metrics = flat_metrics(document)
    if not metrics:
        raise WeMaskError(f"{path} holds no numeric metrics")
    settings = training_settings(document, read_run_record(path))
    rate = document.get("mask_rate")
    base = {"mask_rate": rate if is_number(rate) else None, "seed": document.get("seed"), "std": 0.0, "se": None, "seeds": 1, "n": None}
    return [(settings, {**base, "metric": metric, "value": value}) for metric, value in metrics.items()]


def eval_rows(document: dict, path: Path) -> list[tuple[dict, dict]]:
    """An eval's results: seeds averaged per (rate, mode, quantization, metric), with their std across seeds."""
    task = document.get("task") or ""
    groups: dict[tuple, list[dict]] = {}
    results = [r for r in document["results"] if isinstance(r, dict) and is_number(r.get("value")) and "metric" in r]
    for result in results:
        rate = result.get("mask_rate", document.get("mask_rate"))
        mode = result.get("mode", document.get("mode")) or ""
        groups.setdefault((rate, mode, result.get("quantize") or "none", result["metric"]), []).append(result)
    if not groups:
        raise WeMaskError(f"{path}: its 'results' hold no numeric metric values")
    me_layer = next((r["me_layer"] for r in results if r.get("me_layer") is not None), None)  # the run's (r=0 has none)
    paired = paired_changes(document)
    pairs = []
    for (rate, _mode, quantize, metric), found in groups.items():
        values = [r["value"] for r in found]
        ses = [r["se"] for r in found if is_number(r.get("se"))]
        name = f"{task}/{metric}" if task and metric != task and "/" not in metric else metric
        settings = eval_settings(document, rate, quantize, me_layer)
        row = {"mask_rate": rate, "seed": settings["seed"], "metric": name, "value": statistics.fmean(values),
               "std": statistics.stdev(values) if len(values) > 1 else 0.0, "se": statistics.fmean(ses) if ses else None,
               "seeds": len(values), "n": found[0].get("n"),
               **paired.get((rate, mode, quantize, metric), dict.fromkeys(PAIRED_COLUMNS))}  # fmt: skip
        pairs.append((settings, row))
    return pairs


def paired_changes(document: dict) -> dict[tuple, dict]:
    """An eval summary's paired changes from r = 0 by (rate, mode, quantization, metric), as PAIRED_COLUMNS."""
    changes = {}
    for entry in document.get("summary") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("p_value"), (int, float)):
            continue
        interval = entry.get("paired_ci95") if isinstance(entry.get("paired_ci95"), list) else [None, None]
        key = (entry.get("mask_rate", document.get("mask_rate")), entry.get("mode", document.get("mode")) or "",
               entry.get("quantize") or "none", entry.get("metric"))
        changes[key] = dict(zip(PAIRED_COLUMNS, [entry.get("delta"), *interval[:2], entry["p_value"], entry.get("test")]))
    return changes


def flat_metrics(document: dict) -> dict[str, float]:
    """A training run's numeric metrics: top level and under `metrics`, one level of nesting as `parent/key`."""
    metrics: dict[str, float] = {}
    sources = [document] + ([document["metrics"]] if isinstance(document.get("metrics"), dict) else [])
    for source in sources:
        for key, value in source.items():
            if key in NOT_METRICS or key == "metrics":
                continue
            if is_number(value):
                metrics[key] = float(value)
            elif isinstance(value, dict) and source is document:
                metrics.update({f"{key}/{sub}": float(v) for sub, v in value.items() if is_number(v)})
    return metrics


SHOWN = 3  # names or reasons listed in one line before "and N more"


def listing(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def run_label(path: Path, root: Path) -> str:
    """How a run is named in the table: the directory as given (plus the sub-directory it was found in)."""
    return str(root) if path.parent == root else str(root / path.parent.name)


def gather(directories: list[Path]) -> list[dict]:
    """The long rows of every metrics.json under these directories, each named by its run and its line (the
    settings that differ from the other runs'). Directories without metrics.json are skipped with one line, an
    unreadable metrics.json with one line each (the first few)."""
    if not directories:
        raise WeMaskError("no run directory given: wemask report DIR [DIR...]")
    pairs, empty, unreadable = [], [], []
    for directory in directories:
        found = find_metrics(Path(directory))
        if not found:
            empty.append(str(directory))
        for path in found:
            run = run_label(path, Path(directory))
            try:
                document = read_document(path)
                if (note := replaced_run_note(document, path)) is not None:
                    say(note)
                    continue
                pairs += [(settings, {"run": run, **row}) for settings, row in result_rows(document, path)]
            except WeMaskError as err:
                unreadable.append(str(err))
    if empty:
        say(f"skipping {listing(empty)}: no {METRICS_FILE} in {'it' if len(empty) == 1 else 'them'} or "
            f"{'its' if len(empty) == 1 else 'their'} sub-directories")
    for why in unreadable[:SHOWN]:
        say(f"skipping {why}")
    if len(unreadable) > SHOWN:
        say(f"skipping {len(unreadable) - SHOWN} more unreadable {METRICS_FILE} files")
    if not pairs:
        reasons = f" ({unreadable[0]})" if unreadable else ""
        raise WeMaskError(
            f"no {'readable ' if unreadable else ''}{METRICS_FILE} in {listing([str(d) for d in directories])}{reasons}: give run directories "
            "written by `wemask eval --output DIR` or a training command"
        )
    names = line_names([settings for settings, _ in pairs], [row["mask_rate"] for _, row in pairs])
    return [
        {**{k: settings[k] for k in SETTING_COLUMNS}, **row, "line": name, "stage": settings["stage"], "task": settings["task"]}
        for (settings, row), found in zip(pairs, names)
        for name in found
    ]


def points(rows: list[dict]) -> list[dict]:
    """Rows of one setting (stage, task, line), mask rate and metric merged, with `runs` listing them. Runs of
    different seeds are averaged, with `std` across the seeds (spread "seeds"); runs of the same seed (or none) are
    duplicates: their mean, no spread. A single run keeps its own std across the seeds it evaluated."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["stage"], row["task"], row["line"], row["mask_rate"], row["metric"]), []).append(row)
    merged = []
    for found in groups.values():
        by_seed: dict = {}
        for row in found:
            by_seed.setdefault(row["seed"], []).append(row["value"])
        means = [statistics.fmean(values) for values in by_seed.values()]
        seeds = len(means) > 1 and None not in by_seed
        own = len(found) == 1 and found[0]["seeds"] > 1
        merged.append({
            **found[0], "value": statistics.fmean(means), "std": statistics.stdev(means) if seeds else found[0]["std"] if own else 0.0,
            "se": found[0]["se"] if len(found) == 1 else None, "runs": [r["run"] for r in found],
            "spread": "seeds" if seeds or own else None, "duplicates": len(found) - len(means),
            **({} if len(found) == 1 else dict.fromkeys(PAIRED_COLUMNS)),  # a paired test belongs to one run
        })  # fmt: skip
    return merged


def write_rows(rows: list[dict], json_out: Path | None, csv_out: Path | None) -> list[Path]:
    """The merged rows as strict JSON and/or CSV, each written atomically."""
    written = []
    if json_out:
        written.append(atomic_write_json(json_out, rows))
    if csv_out:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        written.append(atomic_write_text(csv_out, text.getvalue()))
    return written


def report_inputs(directories: list[Path]) -> list[tuple[str, Path]]:
    """What the report reads: the run directories (each run's files, its metrics.json and run record inside)."""
    return [("a run directory", Path(d)) for d in directories]


def plan_report(
    directories: list[Path], json_out: Path | None, csv_out: Path | None, plot: Path | None, no_plot: bool, overwrite: bool
) -> tuple[list[Path], Path | None, OutputClaim | None]:
    """Before reading anything: the run directories (files and an earlier report's own folder skipped with a line),
    the plot path, and the claim of the report's own folder when the default plot goes there (report_output.py);
    every output file checked (new, or --overwrite; writable; never one of the runs' files). Only the files asked
    for are written; with none asked for, the default plot."""
    skipped = [d for d in directories if Path(d).is_file()]
    for path in skipped:
        say(f"skipping {path}: a file, not a run directory")
    reports = [d for d in directories if not Path(d).is_file() and is_report_folder(Path(d))]
    if reports:
        say(f"skipping {listing([str(d) for d in reports])}: the output of an earlier wemask report")
    directories = [Path(d) for d in directories if not Path(d).is_file() and d not in reports]
    if not directories and (skipped or reports):
        raise WeMaskError("no run directory among the arguments: give run directories holding metrics.json")
    for path, flag in ((json_out, "--json"), (csv_out, "--csv"), (plot, "--plot")):
        if path is not None:
            check_output_file(path, overwrite=overwrite, flag=flag, inputs=report_inputs(directories))
    if plot is None and not (no_plot or json_out or csv_out) and directories and directories[0].is_dir():
        plot, claim = claim_default_output(directories, overwrite)
        return directories, plot, claim
    return directories, plot, None
