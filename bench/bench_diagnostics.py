"""The cost of --log-diagnostics: the same short SFT run on the embedded SmolLM2-135M (LoRA, WeMask aware r = 0.3,
the bundled chat data, batch 4 x up to 128 tokens) with and without it, logging every step (the most often it
measures: once per logging step, plus step 0), through the shared training run (`wemask sft`'s). The runs alternate
which goes first; each side's median over the repeats of the trainer's own run time (metrics.json `runtime_s`) and of
this process's CPU time during training, and their ratios (with / without)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run as train_run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
STEPS, REPEATS = 10, 2
SMOKE = {"STEPS": 2, "REPEATS": 1}


class TrainingCPUTime(TrainerCallback):
    """This process's CPU seconds from the start to the end of training."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.process_time()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.process_time() - self.start


def train_once(folder: Path, diagnostics: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one run's training."""
    clock = TrainingCPUTime()
    options = TrainOptions(output_dir=str(folder), dataset=str(ROOT / "data" / "sft_chat.jsonl"), mask_rate=0.3,
                           use_peft=True, log_diagnostics=diagnostics)  # fmt: skip
    flags = ["--max-steps", str(STEPS), "--logging-steps", "1", "--per-device-train-batch-size", "4", "--max-length", "128",
             "--learning-rate", "1e-4", "--report-to", "none", "--save-strategy", "no", "--seed", "0"]  # fmt: skip
    result = train_run(SFTStage(), options, flags, callbacks=[clock])
    return result.metrics["runtime_s"], clock.seconds


def run() -> dict:
    times = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(REPEATS):
            for diagnostics in (False, True) if i % 2 == 0 else (True, False):
                times[diagnostics].append(train_once(Path(tmp) / f"run-{i}-{diagnostics}", diagnostics))
    wall = {side: statistics.median(t[0] for t in found) for side, found in times.items()}
    cpu = {side: statistics.median(t[1] for t in found) for side, found in times.items()}
    return {
        f"training s, {STEPS} steps (plain logging)": wall[False],
        f"training s, {STEPS} steps (--log-diagnostics, every step)": wall[True],
        "time ratio with/without --log-diagnostics": wall[True] / wall[False],
        "CPU-time ratio with/without --log-diagnostics": cpu[True] / cpu[False],
        "s per measurement (wall, the difference over the measurements)": (wall[True] - wall[False]) / (STEPS + 1),
        "threads": torch.get_num_threads(),
    }

