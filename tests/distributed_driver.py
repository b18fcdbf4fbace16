"""Run by the multi-process tests under a launcher (torchrun): several wemask jobs in the same processes, which
saves a process start and its imports (~10 s on two busy cores) per job. Not a test module.

    python -m torch.distributed.run --nproc_per_node 2 tests/distributed_driver.py JOBS.json

JOBS.json is a list of jobs, each run in order on every rank:
  {"train": "sft"|"dpo"|"grpo", "options": {TrainOptions fields}, "flags": [TRL flags], "probe": DIR}
      the real training run (wemask_cli.train.run.run); then each rank writes DIR/rank-R.json: what it holds of
      the trained model (and of the reference model), which layers carry a WeMask hook, and the log entries with
      --log-diagnostics values.
  {"cli": [wemask arguments], "probe": DIR}
      the real entry point (wemask_cli.cli.main); each rank writes DIR/rank-R.json with its exit code.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def holdings(model) -> dict:
    """The embedding's global and local shapes on this rank, and the layers masked."""
    from wemask_cli.method.wemask_hook import masked_layers

    embedding = model.get_input_embeddings().weight
    local = getattr(embedding, "_local_tensor", embedding)
    return {
        "type": type(embedding).__name__,
        "shape": list(embedding.shape),
        "local_shape": list(local.shape),
        "masked_layers": masked_layers(model),
    }


def train(job: dict) -> dict:
    from wemask_cli.train.dpo import DPOStage
    from wemask_cli.train.grpo import GRPOStage
    from wemask_cli.train.options import TrainOptions
    from wemask_cli.train.run import run
    from wemask_cli.train.sft import SFTStage

    stage = {"sft": SFTStage, "dpo": DPOStage, "grpo": GRPOStage}[job["train"]]()
    result = run(stage, TrainOptions(**job["options"]), job["flags"])
    trainer = result.trainer
    found = {"policy": holdings(trainer.model), "distributed_type": str(trainer.accelerator.state.distributed_type),
             "diagnostics": [entry for entry in trainer.state.log_history if any(key.startswith("wemask/") for key in entry)]}
    if getattr(trainer, "ref_model", None) is not None:
        found["reference"] = holdings(trainer.ref_model)
    return found


def cli(job: dict) -> dict:
    from wemask_cli.cli import main

    sys.argv = ["wemask", *job["cli"]]
    try:
        main()
    except SystemExit as exit_info:
        return {"code": exit_info.code or 0}
    return {"code": 0}


def main() -> None:
    for job in json.loads(Path(sys.argv[1]).read_text()):
        found = train(job) if "train" in job else cli(job)
        probe = Path(job["probe"])
        probe.mkdir(parents=True, exist_ok=True)
        (probe / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
