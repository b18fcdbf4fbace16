"""`wemask report DIR...`: gather the metrics.json of any number of runs into one table, one plot, JSON/CSV.

Each DIR contributes its own metrics.json and those of its immediate sub-directories (so an eval output
written inside a training run is found too). Two layouts are read:
- eval (wemask_cli/eval): a `results` list of {mask_rate, mode, quantize, seed, metric, value, se, n}; seeds are
  averaged (mean, std across seeds); a quantized variant is its own row and line (mode 'free · w4a4'), and so is
  a run with remedies (mode 'aware + gated_norm', from `interventions` or the eval's provenance). Metric
  names become `<task>/<metric>`, e.g. `choice/accuracy`
  (`perplexity` stays `perplexity`).
- any other run (sft, dpo, grpo, ...): a flat object with `stage`, `mode`, `mask_rate` and numeric metrics,
  top level or under `metrics` (one level of nested dicts is flattened as `parent/key`); bookkeeping numbers
  (seed, steps, epoch, throughput, ...) are not metrics.
Rows are long: {run, stage, task, mode, quantize, mask_rate, metric, value, std, se, seeds, n}.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from ..errors import WeMaskError
from ..outputs import atomic_write_json, atomic_write_text, check_output_file
from ..progress import say

METRICS_FILE = "metrics.json"
NOT_METRICS = {
    "mask_rate", "me_layer", "strength", "seed", "seeds", "world_size", "global_step", "epoch", "runtime_s", "version",
    "n_examples", "mean_step_time_s", "train_samples_per_second", "train_steps_per_second", "reward_weights",
    "dropped_examples",
}
COLUMNS = ["run", "stage", "task", "mode", "quantize", "mask_rate", "metric", "value", "std", "se", "seeds", "n"]


def find_metrics(directory: Path) -> list[Path]:
    directory = Path(directory)
    if not directory.exists():
        raise WeMaskError(f"{directory}: no such directory")
    found = [directory / METRICS_FILE] if (directory / METRICS_FILE).is_file() else []
    found += sorted(p for p in directory.glob(f"*/{METRICS_FILE}") if p.is_file())
    if not found:
        raise WeMaskError(
            f"{directory} has no {METRICS_FILE} (nor its sub-directories): give run directories written by "
            "`wemask eval --output DIR` or a training command"
        )
    return found


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


def variant_label(mode: str, quantize: str, remedies: list | None = None) -> str:
    """The mode as tables and plot lines show it: remedies and quantization make their own line
    ('aware + gated_norm', 'free · w4a4')."""
    label = " + ".join([mode, *(remedies or [])])
    return label if quantize == "none" else f"{label} · {quantize}"


def remedy_kinds(document: dict) -> list[str]:
    """The remedies a run trained with (training metrics) or an eval ran with (re-applied from the model)."""
    if isinstance(document.get("interventions"), list):
        return [str(kind) for kind in document["interventions"]]
    applied = ((document.get("provenance") or {}).get("model") or {}).get("interventions") or []
    return [str(entry.get("kind")) for entry in applied if isinstance(entry, dict) and entry.get("kind") != "wemask"]


def rows_from_document(run: str, document: dict, path: Path) -> list[dict]:
    """Long rows for one metrics.json (see the module doc for the two layouts)."""
    stage = document.get("stage") or "?"
    task = document.get("task") or ""
    remedies = remedy_kinds(document)
    if isinstance(document.get("results"), list):
        groups: dict[tuple, list[dict]] = {}
        for result in document["results"]:
            if not isinstance(result, dict) or not is_number(result.get("value")) or "metric" not in result:
                continue
            rate = result.get("mask_rate", document.get("mask_rate"))
            mode = result.get("mode", document.get("mode")) or "none"
            groups.setdefault((rate, mode, result.get("quantize") or "none", result["metric"]), []).append(result)
        rows = []
        for (rate, mode, quantize, metric), results in groups.items():
            values = [r["value"] for r in results]
            ses = [r["se"] for r in results if is_number(r.get("se"))]
            rows.append(
                {"run": run, "stage": stage, "task": task, "mode": variant_label(mode, quantize, remedies), "quantize": quantize,
                 "mask_rate": rate, "metric": f"{task}/{metric}" if task and metric != task and "/" not in metric else metric,
                 "value": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                 "se": statistics.fmean(ses) if ses else None, "seeds": len(values), "n": results[0].get("n")}
            )
        if not rows:
            raise WeMaskError(f"{path}: its 'results' hold no numeric metric values")
        return rows
    missing = [key for key in ("stage", "mask_rate") if key not in document]
    if missing:
        raise WeMaskError(f"{path} has no {' or '.join(repr(k) for k in missing)}: it is not a wemask metrics file")
    metrics: dict[str, float] = {}
    sources = [("", document)] + ([("", document["metrics"])] if isinstance(document.get("metrics"), dict) else [])
    for prefix, source in sources:
        for key, value in source.items():
            if key in NOT_METRICS or key == "metrics":
                continue
            if is_number(value):
                metrics[prefix + key] = float(value)
            elif isinstance(value, dict) and source is document:
                for sub, subvalue in value.items():
                    if is_number(subvalue):
                        metrics[f"{key}/{sub}"] = float(subvalue)
    if not metrics:
        raise WeMaskError(f"{path} holds no numeric metrics")
    rate = document.get("mask_rate")
    return [
        {"run": run, "stage": stage, "task": task, "mode": variant_label(document.get("mode") or "none", "none", remedies),
         "quantize": "none",
         "mask_rate": rate if is_number(rate) else None, "metric": metric, "value": value, "std": 0.0, "se": None,
         "seeds": 1, "n": None}
        for metric, value in metrics.items()
    ]


def run_label(path: Path, root: Path) -> str:
    """How a run is named in the table: the directory as given (plus the sub-directory it was found in)."""
    return str(root) if path.parent == root else str(root / path.parent.name)


def gather(directories: list[Path]) -> list[dict]:
    if not directories:
        raise WeMaskError("no run directory given: wemask report DIR [DIR...]")
    rows = []
    for directory in directories:
        for path in find_metrics(Path(directory)):
            rows.extend(rows_from_document(run_label(path, Path(directory)), read_document(path), path))
    return rows


def write_rows(rows: list[dict], json_out: Path | None, csv_out: Path | None) -> list[Path]:
    """The merged rows as strict JSON and/or CSV, each written atomically."""
    written = []
    if json_out:
        written.append(atomic_write_json(json_out, rows))
    if csv_out:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        written.append(atomic_write_text(csv_out, text.getvalue()))
    return written


def default_plot_path(directories: list[Path]) -> Path:
    """report.png in the directory that holds the runs (runs/ for `wemask report runs/*`)."""
    import os

    parents = [str(Path(d).resolve().parent) for d in directories]
    return Path(os.path.commonpath(parents)) / "report.png"


def plan_report(
    directories: list[Path], json_out: Path | None, csv_out: Path | None, plot: Path | None, no_plot: bool, overwrite: bool
) -> tuple[list[Path], Path | None]:
    """Before reading anything: the run directories (files skipped with a line) and the plot path; every output
    file checked (new, or --overwrite; writable)."""
    skipped = [d for d in directories if Path(d).is_file()]
    for path in skipped:
        say(f"skipping {path}: a file, not a run directory")
    directories = [Path(d) for d in directories if not Path(d).is_file()]
    if not directories and skipped:
        raise WeMaskError("every argument is a file: give run directories holding metrics.json")
    plot = None if no_plot or not directories else plot or default_plot_path(directories)
    for path, flag in ((json_out, "--json"), (csv_out, "--csv"), (plot, "--plot")):
        if path is not None:
            check_output_file(path, overwrite=overwrite, flag=flag)
    return directories, plot
