"""Under a launcher (2 torchrun processes): eval, infer and locate share the work and write from rank 0 only, so each
output is written once and no second folder appears; errors are printed once; --fsdp on the command line shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER = str(ROOT / "tests" / "distributed_driver.py")


def test_eval_infer_and_locate_write_once_and_errors_print_once(tmp_path, tiny_model_dir):
    model = ["--model", tiny_model_dir]
    jobs = [
        {"cli": ["infer", *model, "--prompt", "Hi", "--max-new-tokens", "2", "-o", "completions.jsonl"], "probe": "probe-infer"},
        {"cli": ["eval", *model, "--task", "perplexity", "--limit", "2"], "probe": "probe-eval"},  # no -o: runs/eval/...
        {"cli": ["locate", *model, "--num-prompts", "2", "--json", "report.json"], "probe": "probe-locate"},
        {"cli": ["eval", *model, "--task", "no-such-task"], "probe": "probe-error"},
        {"cli": ["sft", *model, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "-o", "fsdp", "-r", "0.3", "--me-layer", "1",
                 "--fsdp", "--max-steps", "1", "--per-device-train-batch-size", "2",
                 "--max-length", "64", "--save-strategy", "no"], "probe": "probe-sft"},
    ]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", DRIVER, "jobs.json"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]

    def codes(job: str) -> list[int]:
        return [json.loads((tmp_path / job / f"rank-{rank}.json").read_text())["code"] for rank in (0, 1)]

    assert codes("probe-infer") == codes("probe-eval") == codes("probe-locate") == [0, 0]
    assert len((tmp_path / "completions.jsonl").read_text().splitlines()) == 1 and log.count("Wrote 1 records") == 1
    assert len(list((tmp_path / "runs" / "eval").iterdir())) == 1  # one folder (each rank used to make its own)
    assert json.loads((tmp_path / "report.json").read_text())["num_layers"] == 4
    assert codes("probe-error") == [2, 2] and log.count("wemask: error:") == 1 and "no-such-task" in log
    assert codes("probe-sft") == [0, 0] and log.count("wemask: FSDP: rank 0 holds") == 1
    assert log.count("wemask: saved to") == 1 and "Traceback" not in log
