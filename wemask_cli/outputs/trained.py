"""What a training run folder says about how its weights were trained, for the outputs of commands that load it.

`wemask eval --model runs/r0.3` records this summary in its provenance, so that `wemask report` groups the eval by
the training setting (stage, mode, training mask rate, data, LoRA, remedies, TRL arguments) rather than by the
folder's path. Torch-free; a folder that is not a finished wemask training run gives None.
"""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.outputs.names import METRICS_FILE, RUN_RECORD_FILE

METRIC_KEYS = ("stage", "mode", "mask_rate", "me_layer", "select", "layers", "strength", "model", "dataset", "peft",
               "interventions", "seed")  # fmt: skip
RECORD_KEYS = ("stage", "seed", "model_source", "data_sha256", "options", "trl_args")


def read_object(path: Path) -> dict:
    """A JSON object file ({} when missing, unreadable or not an object)."""
    try:
        document = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return document if isinstance(document, dict) else {}


def training_summary(folder: str | Path) -> dict | None:
    """{"metrics": {...}, "record": {...}}: the settings of the wemask training run saved in `folder`, else None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    metrics, record = read_object(folder / METRICS_FILE), read_object(folder / RUN_RECORD_FILE)
    if not metrics.get("stage") or "results" in metrics or not record:
        return None
    return {"metrics": {k: metrics.get(k) for k in METRIC_KEYS}, "record": {k: record.get(k) for k in RECORD_KEYS}}


PLAIN = "plain"  # the mode of a point without a mask (r = 0)


def mode_at(rate, trained: dict | None, saved_mode: str | None = None) -> str:
    """How a model was masked at `rate` (docs/guide/sweeps.md): 'plain' at r = 0; for a wemask training run
    (`trained`: its metrics summary) its mode at the rate it trained with, 'free' at any other rate; else the saved
    config's mode, blank where nothing was trained."""
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate <= 0:
        return PLAIN
    if not trained:
        return saved_mode or ""
    trained_rate = trained.get("mask_rate")
    return (trained.get("mode") or "aware") if rate == trained_rate else "free"
