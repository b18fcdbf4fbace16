"""Under 2 processes the trainer's train_loss averaged the processes' losses only at logging steps, adding the rest
from rank 0 alone, so it changed with --logging-steps (DDP: 3.193 against 2.957). Logging the last step makes every
step's loss the mean over processes: the same train_loss whatever --logging-steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRIVER = str(ROOT / "tests" / "distributed_driver.py")


def test_ddp_train_loss_does_not_depend_on_logging_steps(tmp_path, tiny_model_dir):
    base = ["sft", "--model", tiny_model_dir, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "--max-steps", "3",
            "--per-device-train-batch-size", "2", "--max-length", "48", "--save-strategy", "no", "--report-to", "none"]  # fmt: skip
    jobs = [{"cli": [*base, "--logging-steps", str(steps), "-o", f"log{steps}"], "probe": f"probe{steps}"} for steps in (1, 10)]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", DRIVER, "jobs.json"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    every, rarely = (json.loads((tmp_path / f"log{steps}" / "metrics.json").read_text()) for steps in (1, 10))
    assert every["world_size"] == 2 and every["train_loss"] == pytest.approx(rarely["train_loss"], rel=1e-5)
