"""--log-diagnostics under DDP (2 gloo processes, LoRA, gradient checkpointing): every process measures the same probe
on the same weights at every logging step, so the run ends (nobody waits for a collective) and the processes log the
same values; rank 0's metrics.json has them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER = str(ROOT / "tests" / "distributed_driver.py")


def test_every_process_logs_the_same_probe(tmp_path, tiny_model_dir):
    options = {"model": tiny_model_dir, "output_dir": str(tmp_path / "run"), "dataset": str(ROOT / "data" / "sft_chat.jsonl"),
               "mask_rate": 0.5, "me_layer": 1, "use_peft": True, "log_diagnostics": True}  # fmt: skip
    flags = ["--max-steps", "3", "--per-device-train-batch-size", "2", "--max-length", "48", "--logging-steps", "1",
             "--learning-rate", "1e-2", "--gradient-checkpointing", "--save-strategy", "no", "--report-to", "none"]  # fmt: skip
    (tmp_path / "jobs.json").write_text(json.dumps([{"train": "sft", "options": options, "flags": flags, "probe": "probe"}]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", DRIVER, "jobs.json"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    ranks = [json.loads((tmp_path / "probe" / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    logged = [[{k: v for k, v in entry.items() if k.startswith("wemask/") or k == "step"} for entry in found["diagnostics"]]
              for found in ranks]  # fmt: skip
    assert [entry["step"] for entry in logged[0]] == [0, 1, 2, 3] and logged[0] == logged[1]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["diagnostics_history"] == [[e["step"], e["wemask/first_token_norm"], e["wemask/sink_mass"],
                                               e["wemask/effective_rank"]] for e in logged[0]]  # fmt: skip
