"""What a run writes next to its weights: the run record (wemask_run.json), the WeMask config (wemask_config.json)
and, in the output folder, metrics.json. All written atomically, as strict JSON.

In a checkpoint the WeMask config is written first and the run record last: a checkpoint counts as complete for
`--resume` only when both (and TRL's trainer_state.json) are there and readable (checkpoints.py).
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.outputs import METRICS_FILE, RUN_RECORD_FILE, atomic_write_json, strict_json
from wemask_cli.runtime.versions import RUN_LIBRARIES, library_versions


def versions() -> dict:
    return {"python": platform.python_version(), **library_versions(RUN_LIBRARIES)}


class RunRecord:
    """The run's settings and provenance, written with every checkpoint and the final output."""

    def __init__(self, stage, resolved, resumed_from: str | None):
        self.stage, self.resolved, self.resumed_from = stage, resolved, resumed_from
        self.installation = None  # install.StageInstallation, set once the stage has installed
        self.distributed: dict | None = None  # distributed.run_facts: what ran, set once the trainer is built
        self.source: str | None = None
        self.data_format: str | None = None
        self.data_sha256: str | None = None  # of a local --dataset (report groups runs by it)
        self.precision = None  # precision.PrecisionProbe: the dtypes training really used
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def run_json(self, config: WeMaskConfig, directory: Path) -> dict:
        args = self.resolved.args
        return {
            "stage": self.stage.name,
            "command": sys.argv,
            "started": self.started,
            "resumed_from": self.resumed_from,
            "seed": args.seed,
            "world_size": args.world_size,
            "distributed": self.distributed,
            "dtypes": self.precision.facts(directory) if self.precision else None,
            "model_source": self.source,
            "data_format": self.data_format,
            "data_sha256": self.data_sha256,
            "wemask": config.to_dict(),
            "interventions": [c.to_dict() for c in self.installation.remedies.configs] if self.installation.remedies else [],
            "options": self.resolved.opts,
            "trl_config_class": type(args).__name__,
            "trl_args": args.to_dict(),
            "set_by": self.resolved.provenance,
            "versions": versions(),
        }

    def write(self, directory: str | Path, model=None) -> WeMaskConfig:
        """Save the model's tied weights once (tied.py), write the interventions (configs, the remedies' weights,
        wemask_config.json), then the run record (the checkpoint's completion mark), each atomically; returns the
        WeMask config written (free mode: dims from the weights saved)."""
        from wemask_cli.train.install import free_mode_dims
        from wemask_cli.train.tied import save_tied_once

        directory = Path(directory)
        if model is not None:
            save_tied_once(directory, model)
        config = self.installation.wemask
        if config.mode == "free" and model is not None:
            config = free_mode_dims(model, config)
        self.installation.save(directory, config)
        atomic_write_json(directory / RUN_RECORD_FILE, self.run_json(config, directory))
        return config


def last_logged(trainer, key: str):
    """The last value of `key` in the trainer's log history (None when never logged)."""
    return next((entry[key] for entry in reversed(trainer.state.log_history) if key in entry), None)


def loss_history(trainer) -> list[list[float]]:
    return [[entry["step"], entry["loss"]] for entry in trainer.state.log_history if "loss" in entry and "step" in entry]


def whole_run_train_loss(trainer, summary: dict, resumed_step: int):
    """The mean training loss over the whole run. After a resume, the trainer's own `train_loss` averages only the
    steps after `resumed_step`; the losses logged before it (each the mean since the previous log, read back from
    trainer_state.json) are weighted in by their steps. A step trained but never logged before the checkpoint is
    not in either and is left out."""
    mean_after = summary.get("train_loss")
    after = trainer.state.global_step - resumed_step
    if not resumed_step or (mean_after is None and after):
        return mean_after
    total, previous = 0.0, 0
    for step, loss in loss_history(trainer):
        if step > resumed_step:
            break
        total += loss * (step - previous)
        previous = step
    if not after:  # resumed at the last step (killed during the final save): nothing trained after it
        return total / previous if previous else mean_after
    return (total + mean_after * after) / (previous + after)


def write_metrics(trainer, output, ctx, stage, config: WeMaskConfig, seconds: float, eval_metrics: dict, resumed_step: int = 0) -> dict:
    """metrics.json: a flat summary `wemask report` reads (keys documented in the README); strict JSON."""
    history = loss_history(trainer)
    summary = next((e for e in reversed(trainer.state.log_history) if "train_loss" in e), {})
    metrics = {
        "stage": stage.name,
        "status": "finished",
        "mode": config.mode,
        "mask_rate": config.mask_rate,
        "me_layer": config.me_layer,
        "select": config.select,
        "layers": config.layers,
        "strength": config.strength,
        "model": ctx.loaded.source,
        "dataset": ctx.options["dataset"],
        "peft": bool(ctx.peft_config),
        "interventions": [remedy.kind for remedy in ctx.remedies],  # the remedies besides WeMask (report labels runs by them)
        "seed": ctx.args.seed,
        "world_size": ctx.args.world_size,
        "global_step": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "train_loss": whole_run_train_loss(trainer, summary, resumed_step),
        "final_loss": history[-1][1] if history else summary.get("train_loss"),  # no step logged: the run's mean
        "eval_loss": eval_metrics.get("eval_loss", last_logged(trainer, "eval_loss")),  # TRL's own evaluations, else ours
        "runtime_s": round(seconds, 3),
        "train_samples_per_second": summary.get("train_samples_per_second"),
        "train_steps_per_second": summary.get("train_steps_per_second"),
        "loss_history": history,
        "dropped_examples": stage.dropped,
        **stage.extra_metrics(trainer),
        **(ctx.diagnostics.metrics(trainer) if ctx.diagnostics is not None else {}),
    }
    atomic_write_json(Path(output) / METRICS_FILE, metrics)
    return strict_json(metrics)[0]
