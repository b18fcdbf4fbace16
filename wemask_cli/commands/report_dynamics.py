"""The training-dynamics curves of `wemask report`: the `diagnostics_history` a run trained with --log-diagnostics
writes to its metrics.json ([step, first_token_norm, sink_mass, effective_rank] per logging step, step 0 first),
one curve per run."""

from __future__ import annotations

from pathlib import Path

from wemask_cli.outputs import METRICS_FILE

NAMES = ("first_token_norm", "sink_mass", "effective_rank")  # the columns after the step (train/diagnostics.py)


def run_histories(rows: list[dict]) -> list[dict]:
    """{run, line, stage, mode, mask_rate, history} for each run among the report's rows whose metrics.json holds a diagnostics history,
    in the rows' order."""
    import json

    found, seen = [], set()
    for row in rows:
        if row["run"] in seen or row["task"]:
            continue
        seen.add(row["run"])
        try:
            document = json.loads((Path(row["run"]) / METRICS_FILE).read_text())
        except (OSError, ValueError):
            continue
        history = document.get("diagnostics_history") if isinstance(document, dict) else None
        if isinstance(history, list) and history:
            found.append({"run": row["run"], "line": row["line"], "stage": row["stage"], "mode": row["mode"],
                          "mask_rate": row["mask_rate"], "history": history})
    return found


def curve(history: list, name: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one diagnostic, the measurements without a value (null) left out."""
    column = 1 + NAMES.index(name)
    kept = [(row[0], row[column]) for row in history if len(row) > column and isinstance(row[column], (int, float))]
    return [step for step, _ in kept], [value for _, value in kept]
