"""The math reward inside a real (tiny) GRPO run: the count of unparseable answers reaches the trainer's log."""

from __future__ import annotations

import json

from wemask_cli.rewards.grader import UNPARSEABLE_METRIC
from wemask_cli.train import grpo
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run

TRL = ["--per-device-train-batch-size", "4", "--num-generations", "2", "--max-completion-length", "4",
       "--max-steps", "1", "--logging-steps", "1", "--save-strategy", "no", "--report-to", "none", "--seed", "0"]


def test_grpo_logs_the_unparseable_count(tmp_path, tiny_model_dir):
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {n} plus {n}?", "answer": str(2 * n)}) + "\n" for n in range(4)))
    result = run(
        grpo.GRPOStage(),
        TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "out"), dataset=str(data), mask_rate="0",
                     stage_options={"reward": ["math"]}),
        TRL,
    )
    logged = [entry[UNPARSEABLE_METRIC] for entry in result.trainer.state.log_history if UNPARSEABLE_METRIC in entry]
    assert len(logged) == 1 and 0.0 <= logged[0] <= 4.0
