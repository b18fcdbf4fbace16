"""metrics.json, results.csv and examples.jsonl of an eval run, with its provenance.

metrics.json (`wemask report` reads it):
    {"schema": "wemask-metrics/1", "stage": "eval", "task": "choice", "model": "<dir or hub id>",
     "data": "<file or dataset>", "fields": {...}, "n_examples": 60, "unit": "examples" | "windows",
     "mode": "plain" | "aware" | "free" | "" | null, "mask_rates": [0.0, 0.3], "mask_rate": null, "axes": ["mask_rate", ...],
     "primary_metric": "accuracy", "deltas": {"delta": "mask_rate=0", ...} (what each change is measured against),
     "results": [{"mask_rate": 0.3, "mode": "free", "me_layer": 5, (other axes' labels,) "seed": 0, "metric": "accuracy",
                  "value": 0.41, "se": 0.06 (null with one unit), "n": 60, "delta": 0.02, "delta_se": 0.01,
                  "paired_ci95": [-0.01, 0.05], "p_value": 0.41, "test": "mcnemar" | "sign-flip"}, ...],
     "summary": [{labels..., "metric", "mean", "std" (across seeds), "se", "seeds", "n", "delta", "delta_se",
                  "paired_ci95", "p_value", "test" (over the seeds' unit means)}],
     "paired": {"against": "mask_rate=0", "confidence": 0.95, "resamples": 10000, "seed": 0, "tests": "..."},
     "seeds": {"count": 1, "varies": "..."}, "settings": {...}, "wemask": [applied WeMask config or null per rate],
     "provenance": {"versions": {...}, "model": {...}, "tokenizer": {...}, "data": {...}, "command": "...",
                    "started": "...", "duration_s": 12.3, "processes": 1}, "created": "...", "wemask_version": "..."}
Accuracies and rates are fractions in [0, 1]; `delta` is the change from r = 0 paired unit by unit, `paired_ci95`
its seeded bootstrap 95% interval and `p_value` its paired p-value (none at r = 0, or where units cannot be paired).
results.csv: the results, `paired_ci95` as `paired_ci95_low` and `paired_ci95_high`.
examples.jsonl: one record per unit, variant and seed (prompts and continuations included), each with `run`:
the short provenance (task, model, revision, data hash, start time); strict JSON (non-finite numbers as null).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from wemask_cli.eval.stats import PAIRED_SEED, RESAMPLES, summarize
from wemask_cli.outputs import METRICS_FILE, atomic_write_json, atomic_write_text, strict_json
from wemask_cli.outputs.trained import training_summary
from wemask_cli.runtime.hub import snapshot_revision
from wemask_cli.runtime.ranks import world_size
from wemask_cli.runtime.versions import EVAL_LIBRARIES, library_versions

SCHEMA = "wemask-metrics/1"


def provenance(engine, data_info: dict, started: float, libraries: tuple[str, ...] = ()) -> dict:
    """Library versions, model path, revision and the saved remedies it carries (re-applied), tokenizer BOS/EOS and
    chat-template hash, data, command, times; of a loaded engine (engines/base.py)."""
    tokenizer = engine.tokenizer
    template = getattr(tokenizer, "chat_template", None)
    return {
        "versions": {**library_versions(EVAL_LIBRARIES + libraries), **engine.versions},  # an engine adds its own
        "model": {"path": engine.source, "revision": snapshot_revision(engine.source),
                  "dtype": str(engine.dtype or "").removeprefix("torch.") or None,
                  "interventions": [c.to_dict() for c in engine.installed.configs] if engine.installed else [],
                  "trained": training_summary(engine.source)},
        "tokenizer": {"bos_token": tokenizer.bos_token, "bos_token_id": tokenizer.bos_token_id,
                      "eos_token": tokenizer.eos_token, "eos_token_id": tokenizer.eos_token_id,
                      "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if isinstance(template, str) else None},
        "data": data_info,
        "command": " ".join(["wemask", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 3),
        "processes": world_size(),  # data-parallel under a launcher: each process scored its share of the batches
    }


def metrics_document(*, task: str, primary: str, unit: str, n_examples: int, sweep, settings, seeds_vary: str,
                     prov: dict) -> dict:
    """The metrics.json object of a finished sweep (see the module docstring)."""
    from wemask_cli import __version__

    results = sweep.results
    rates = list(dict.fromkeys(r["mask_rate"] for r in results))
    modes = list(dict.fromkeys(r["mode"] for r in results))
    return {
        "schema": SCHEMA, "stage": "eval", "task": task, "model": prov["model"]["path"],
        "data": prov["data"].get("path") or prov["data"].get("source"), "fields": prov["data"].get("fields", {}),
        "n_examples": results[0]["n"] if results else n_examples, "unit": unit,
        "mode": modes[0] if len(modes) == 1 else None, "mask_rates": rates, "mask_rate": rates[0] if len(rates) == 1 else None,
        "axes": [label for label in sweep.labels if label not in ("mode", "me_layer")],
        "primary_metric": primary, "deltas": sweep.deltas, "results": results,
        "summary": summarize(results, sweep.labels, sweep.paired), **({"paired": PAIRED} if "delta" in sweep.deltas else {}),
        "seeds": {"count": settings.seeds, "varies": seeds_vary},
        "settings": {k: v for k, v in asdict(settings).items() if v is not None},
        **sweep.applied,
        "provenance": prov, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wemask_version": __version__,
    }


PAIRED = {"against": "mask_rate=0", "confidence": 0.95, "resamples": RESAMPLES, "seed": PAIRED_SEED,
          "tests": "McNemar's exact test when both rates score 0/1 per unit, else a sign-flip permutation test"}
RESULT_COLUMNS = ["mask_rate", "mode", "me_layer", "seed", "metric", "value", "se", "n", "delta", "delta_se",
                  "paired_ci95_low", "paired_ci95_high", "p_value", "test"]


def csv_row(result: dict) -> dict:
    """A result row for results.csv: its paired interval as two columns."""
    interval = result.get("paired_ci95") or (None, None)
    return {**result, "paired_ci95_low": interval[0], "paired_ci95_high": interval[1]}


def write_outputs(document: dict, records: list[dict], output: Path) -> list[Path]:
    """metrics.json, results.csv and examples.jsonl (one record per unit, with the run's short provenance)."""
    written = [atomic_write_json(output / METRICS_FILE, document)]
    extra = [a for a in document.get("axes", []) if a not in RESULT_COLUMNS]
    columns = RESULT_COLUMNS[:3] + extra + RESULT_COLUMNS[3:]
    columns += sorted({k for r in document["results"] for k in r if k.startswith("delta_") and k not in columns})
    columns += ["engine"] if any("engine" in r for r in document["results"]) else []
    handle = io.StringIO()
    writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(csv_row(result) for result in document["results"])
    written.append(atomic_write_text(output / "results.csv", handle.getvalue()))
    if records:
        prov = document["provenance"]
        run = {"task": document["task"], "model": prov["model"]["path"], "revision": prov["model"]["revision"],
               "data_sha256": prov["data"].get("sha256"), "started": prov["started"]}
        clean = (strict_json({**record, "run": run})[0] for record in records)
        lines = "".join(json.dumps(record, default=str, allow_nan=False) + "\n" for record in clean)
        written.append(atomic_write_text(output / "examples.jsonl", lines))
    return written
