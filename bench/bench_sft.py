"""SFT training step time with WeMask aware (r = 0.3 from layer 5) over plain TRL, on the embedded SmolLM2-135M.

One TRL SFTTrainer, one fixed batch (4 x up to 128 tokens of the bundled chat data), real training steps
(TRL's training_step: forward, loss, backward; then the optimizer step). The hook is installed and removed
between steps, alternating which side runs first; the ratio is the median over adjacent (plain, masked) pairs. Goal: throughput ratio >= 0.99.
On a CPU shared with other work, wall time is noisy: the process CPU-time ratio is reported beside it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from wemask_cli import WeMaskConfig, apply_wemask, remove_wemask

ROOT = Path(__file__).resolve().parents[1]
CONFIG = WeMaskConfig(mask_rate=0.3, me_layer=11, mode="aware")
REPEATS = 16
BATCH, MAX_LENGTH = 4, 128
SMOKE = {"REPEATS": 1, "BATCH": 2, "MAX_LENGTH": 32}


def build_trainer(tmp: str):
    from trl import SFTConfig, SFTTrainer

    from wemask_cli.data import load_training_data
    from wemask_cli.data.formats import SUPERVISED
    from wemask_cli.models.loading import load_model
    from wemask_cli.train.resolve import hardware_defaults

    loaded = load_model(None, dtype="float32")
    dataset, _ = load_training_data(SUPERVISED, str(ROOT / "data" / "sft_chat.jsonl"))
    args = SFTConfig(
        output_dir=tmp, per_device_train_batch_size=BATCH, max_length=MAX_LENGTH, learning_rate=1e-5, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0, **hardware_defaults(SFTConfig),
    )
    return SFTTrainer(model=loaded.model, args=args, train_dataset=dataset, processing_class=loaded.tokenizer)


def run() -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(tmp)
        model = trainer.model
        model.train()
        trainer.create_optimizer()
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise

        def step() -> tuple[float, float]:
            """(wall, CPU) seconds of one step: CPU time of this process is steadier on a shared machine."""
            start, start_cpu = time.perf_counter(), time.process_time()
            trainer.training_step(model, batch)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)
            return time.perf_counter() - start, time.process_time() - start_cpu

        step()  # warm-up (allocations, optimizer state)
        plain, masked = [], []
        for i in range(REPEATS):
            for hooked in ((False, True) if i % 2 == 0 else (True, False)):
                if hooked:
                    handle = apply_wemask(model, CONFIG)
                    masked.append(step())
                    handle.remove()
                else:
                    plain.append(step())
        remove_wemask(model)
    plain_s, masked_s = (statistics.median(t[0] for t in side) for side in (plain, masked))
    # each plain step against the masked step next to it: load that drifts over the run cancels out
    paired = statistics.median(p[0] / m[0] for p, m in zip(plain, masked))
    paired_cpu = statistics.median(p[1] / m[1] for p, m in zip(plain, masked))
    return {
        "step s (plain TRL)": plain_s,
        "step s (WeMask aware r=0.3)": masked_s,
        "throughput ratio (goal >= 0.99)": paired,
        "throughput ratio of medians": plain_s / masked_s,
        "CPU-time throughput ratio": paired_cpu,
        "threads": torch.get_num_threads(),
        "tokens per batch": int(batch["input_ids"].numel()),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
