"""Training progress for logs: when stderr is not a terminal (TRL's tqdm bar is then unreadable), a plain line
at every tenth of the run's steps (every step for ten or fewer), with the latest loss (4 significant digits) and an
ETA; transformers' own printing of each logged dict is left out (trainer_state.json and metrics.json keep them)."""

from __future__ import annotations

import sys

from transformers import TrainerCallback

from wemask_cli.runtime.progress import LineProgress, lines


def rounded(loss) -> str:
    """A loss as wemask prints it: 4 significant digits ('1.302'); anything else (None) as it is."""
    return f"{loss:.4g}" if isinstance(loss, (int, float)) else str(loss)


class StepLines(TrainerCallback):
    """'wemask: training steps: 30/100 (30%), 1 min 2 s elapsed, ETA 2 min 25 s; loss 2.31' in logs."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.counter: LineProgress | None = None
        self.loss: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.stream.isatty():
            self.counter = lines("training steps", state.max_steps, done=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and isinstance(logs.get("loss"), (int, float)):
            self.loss = logs["loss"]

    def on_step_end(self, args, state, control, **kwargs):
        if self.counter is not None:
            self.counter.update(state.global_step, "" if self.loss is None else f"loss {rounded(self.loss)}")


def plain_logs(trainer, stream=None) -> None:
    """In a log (stderr not a terminal) TRL's tqdm bar is one endless line of carriage returns, and its printer
    (--disable-tqdm) writes each logged dict ("{'loss': 1.3016403913497925, ...}") between wemask's lines: both give
    way to StepLines."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    if (stream or sys.stderr).isatty():
        return
    trainer.pop_callback(ProgressCallback)
    trainer.pop_callback(PrinterCallback)
