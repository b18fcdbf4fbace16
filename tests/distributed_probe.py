"""Run several `wemask` commands in one launched process (torchrun / accelerate launch), each with a probe that
writes, per rank, what the trainer really ran with, for tests/test_deepspeed.py to compare with wemask_run.json.

    accelerate launch --config_file CFG --num_processes 2 tests/distributed_probe.py PROBE_DIR '[["sft", ...], ...]'

For command i, rank r writes its exit code to PROBE_DIR/i-exit-r and, at the end of the first step,
PROBE_DIR/i-r.json: the dtypes the first Linear layer computed in, and for each weight matrix its elements held by
this rank when training began (`numel()`: 0 once ZeRO-3 partitioned it away), its full size (`ds_numel`) and this
rank's partition (`ds_tensor.numel()`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

import wemask_cli.train.run as train_run
from wemask_cli.cli import main


class Probe(TrainerCallback):
    def __init__(self, path: Path):
        self.path, self.dtypes, self.handle = path, [], None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.at_start = {name: p.numel() for name, p in model.named_parameters()}
        first = next(m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name)
        self.handle = first.register_forward_hook(lambda module, inputs, output: self.dtypes.append(str(output.dtype)))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step != 1:
            return
        self.handle.remove()
        weights = {
            name: {
                "numel": p.numel(),
                "numel_at_start": self.at_start[name],
                "ds_numel": getattr(p, "ds_numel", None),
                "partition": p.ds_tensor.numel() if hasattr(p, "ds_tensor") else None,
                "trainable": p.requires_grad,
            }
            for name, p in model.named_parameters()
            if name.endswith("weight") and len(getattr(p, "ds_shape", p.shape)) == 2
        }
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.path.with_name(f"{self.path.name}-{rank}.json").write_text(
            json.dumps({"rank": rank, "output_dir": args.output_dir, "compute_dtypes": sorted(set(self.dtypes)), "weights": weights})
        )


def probed_run(plain, path: Path):
    def run(stage, options, extra_args=(), callbacks=None):
        return plain(stage, options, extra_args, [*(callbacks or []), Probe(path)])

    return run


if __name__ == "__main__":
    probe_dir, commands = Path(sys.argv[1]), json.loads(sys.argv[2])
    probe_dir.mkdir(parents=True, exist_ok=True)
    original = train_run.run
    rank = os.environ.get("RANK", "0")
    for index, command in enumerate(commands):
        train_run.run = probed_run(original, probe_dir / str(index))
        sys.argv = ["wemask", *command]
        try:
            main()
        except SystemExit as done:
            (probe_dir / f"{index}-exit-{rank}").write_text(str(done.code or 0))
    train_run.run = original
