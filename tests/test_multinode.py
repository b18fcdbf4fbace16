"""Two nodes simulated on one machine: two `torchrun --nnodes 2 --node_rank I` launchers meeting on 127.0.0.1, each
with its own working folder, output folder and WEMASK_CACHE (no shared file system). What the README documents:
only global rank 0 writes the run; `--resume` is decided by rank 0, and a node that cannot read that checkpoint stops
the run with one line on each side, never a gloo traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_nodes(tmp_path: Path, args: list[str], per_node: int = 1, shared_cache: bool = False) -> list[tuple[int, str]]:
    """Run `wemask ARGS` on both simulated nodes at once, `per_node` processes each: [(exit code, log)] for node 0 and
    node 1. The WEMASK_CACHE is one folder for both with `shared_cache`, else each node's own."""
    port = free_port()
    procs = []
    for node in (0, 1):
        folder = tmp_path / f"node{node}"
        folder.mkdir(exist_ok=True)
        cache = tmp_path / "cache" if shared_cache else folder / "cache"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WEMASK_CACHE": str(cache)}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", str(per_node),
               "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "wemask_cli", *args]
        procs.append(subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return [(proc.wait(timeout=600), proc.stdout.read()) for proc in procs]


def wemask_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("wemask:")]


def test_resume_across_nodes_without_a_shared_folder_stops_with_one_line_per_side(tmp_path, tiny_model_dir):
    train = ["sft", "--model", tiny_model_dir, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "-o", "out", "-r", "0.3",
             "--me-layer", "1", "--per-device-train-batch-size", "2", "--max-length", "64", "--logging-steps", "1", "--save-steps", "1"]
    (code0, log0), (code1, log1) = two_nodes(tmp_path, [*train, "--max-steps", "2"])
    assert code0 == code1 == 0, log0[-3000:] + log1[-3000:]
    node0, node1 = tmp_path / "node0" / "out", tmp_path / "node1" / "out"
    assert (node0 / "metrics.json").is_file() and (node0 / "checkpoint-2" / "wemask_run.json").is_file()
    assert sorted(p.name for p in (node1 / "checkpoint-2").iterdir()) == ["rng_state_1.pth"]  # all node 1 writes
    assert sum(line.startswith("wemask: saved to") for line in wemask_lines(log0)) == 1 and wemask_lines(log1) == []

    (node0 / "metrics.json").unlink()  # as if the run had been killed after its last checkpoint
    (code0, log0), (code1, log1) = two_nodes(tmp_path, [*train, "--max-steps", "3", "--resume"])
    assert code0 != 0 and code1 != 0
    said0 = (
        "wemask: error: --resume: rank 0 resumes from out/checkpoint-2, which rank(s) 1 cannot read: the output folder must "
        "be on a file system all nodes share (or every node must hold the same checkpoints)"
    )
    said1 = (
        "wemask: error: rank 1: --resume: out/checkpoint-2, the checkpoint rank 0 resumes from, is not readable on this node "
        "(no trainer_state.json)"
    )
    assert wemask_lines(log0) == [said0], log0[-3000:]
    assert wemask_lines(log1) == [said1], log1[-3000:]
    assert "Connection closed by peer" not in log0 + log1


@pytest.mark.parametrize("shared_cache", [False, True], ids=["cache-per-node", "shared-cache"])
def test_a_gguf_model_trains_on_two_nodes_of_two_processes(tmp_path, tiny_gguf, shared_cache):
    """Each node's first process converts the .gguf (global ranks 0 and 2; transformers' save_pretrained writes
    nothing on rank 2, which left node 1 a half entry and failed every process); the others wait and reuse it."""
    from wemask_cli.models.gguf_cache import entry_problem

    train = ["sft", "--model", tiny_gguf, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "-o", "out", "-r", "0.3",
             "--me-layer", "1", "--per-device-train-batch-size", "1", "--max-length", "64", "--max-steps", "1",
             "--save-strategy", "no", "--report-to", "none"]
    (code0, log0), (code1, log1) = two_nodes(tmp_path, train, per_node=2, shared_cache=shared_cache)
    assert code0 == code1 == 0, log0[-3000:] + log1[-3000:]
    assert (tmp_path / "node0" / "out" / "metrics.json").is_file()
    caches = [tmp_path / "cache"] if shared_cache else [tmp_path / f"node{node}" / "cache" for node in (0, 1)]
    for cache in caches:
        entries = list((cache / "models").iterdir())
        assert len(entries) == 1 and entry_problem(entries[0]) is None, [p.name for p in entries]
        assert sorted(p.name for p in entries[0].iterdir()) == [
            "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "wemask_gguf_tokenizer.json"]
