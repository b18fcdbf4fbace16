"""The shipped accelerate recipes on 2 CPU (gloo) processes, each launch running several commands
(tests/distributed_probe.py): DeepSpeed ZeRO-3 with sft (full), dpo and grpo (LoRA) really partitions every weight
matrix (a rank holds 0 of its elements), computes in the config's bf16 and saves full weights; ddp.yaml trains in
its bf16; and wemask_run.json says so, each fact with its source. ZeRO-3 with 4-bit weights is refused in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes" / "accelerate"
TINY_TRL = ["--max-steps", "1", "--save-strategy", "no", "--report-to", "none"]
LAUNCHED_BF16 = {"value": "bf16", "source": "accelerate config (mixed_precision: bf16)"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(config: str, probe: Path, commands: list[list[str]]) -> str:
    """`accelerate launch --config_file recipes/accelerate/CONFIG --num_processes 2` of the probe, on the CPU."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(RECIPES / config), "--num_processes", "2",
           "--main_process_port", str(free_port()), str(ROOT / "tests" / "distributed_probe.py"), str(probe), json.dumps(commands)]
    log = probe.parent / f"{probe.name}.log"  # a file, so that a launch that hangs still shows what each rank printed
    with log.open("w") as out:
        try:
            subprocess.run(cmd, check=False, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launch did not end in 900 s; it printed:\n{log.read_text()[-6000:]}")
    return log.read_text()


def sft(model: str, out: Path, *extra: str) -> list[str]:
    return ["sft", "--model", model, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "-o", str(out), "--mask-rate", "0.3",
            "--me-layer", "1", "--per-device-train-batch-size", "2", "--max-length", "64", *TINY_TRL, *extra]


def probed(probe: Path, index: int) -> list[dict]:
    ranks = [json.loads((probe / f"{index}-{rank}.json").read_text()) for rank in (0, 1)]
    assert [(probe / f"{index}-exit-{rank}").read_text() for rank in (0, 1)] == ["0", "0"]
    return ranks


def record(out: Path) -> dict:
    return json.loads((out / "wemask_run.json").read_text())


@pytest.fixture(scope="module")
def zero3(tmp_path_factory, tiny_model_dir):
    """One ZeRO-3 launch: a refused 4-bit sft, then sft (full), dpo and grpo (LoRA), 1 step each."""
    base = tmp_path_factory.mktemp("zero3")
    outs = {stage: base / stage for stage in ("sft", "dpo", "grpo")}
    tiny = ["--model", tiny_model_dir, "--me-layer", "1", "--use-peft", *TINY_TRL]
    commands = [
        sft(tiny_model_dir, base / "qlora", "--use-peft", "--load-in-4bit"),
        sft(tiny_model_dir, outs["sft"]),
        ["dpo", "--config", str(ROOT / "recipes" / "dpo-tiny-cpu.yaml"), "-o", str(outs["dpo"]), *tiny],
        ["grpo", "--config", str(ROOT / "recipes" / "grpo-tiny-cpu.yaml"), "-o", str(outs["grpo"]), *tiny],
    ]
    log = launch("zero3.yaml", base / "probe", commands)
    return base / "probe", outs, log


@pytest.mark.parametrize("index, stage, lora", [(1, "sft", False), (2, "dpo", True), (3, "grpo", True)])
def test_zero3_partitions_every_weight_and_records_what_ran(zero3, tiny_model_dir, index, stage, lora):
    probe, outs, log = zero3
    ranks = probed(probe, index)
    for rank in ranks:
        weights = rank["weights"]
        assert weights and all(w["numel_at_start"] == 0 and w["ds_numel"] > 0 for w in weights.values()), log[-3000:]
        assert all(w["partition"] < w["ds_numel"] <= 2 * w["partition"] for w in weights.values())  # half each
        assert rank["compute_dtypes"] == ["torch.bfloat16"]
        trained = {name for name, w in weights.items() if w["trainable"]}
        assert trained and all(("lora_" in name) == lora for name in trained)
    assert record(outs[stage])["distributed"] == {
        "launcher": "accelerate launch",
        "type": {"value": "DEEPSPEED", "source": "accelerate config (distributed_type: DEEPSPEED)"},
        "world_size": {"value": 2, "source": "accelerate launch (WORLD_SIZE)"},
        "sharding": {"value": "ZeRO-3", "source": "accelerate config (zero_stage: 3)"},
        "precision": LAUNCHED_BF16,
    }
    assert record(outs[stage])["trl_args"]["bf16"] is True and record(outs[stage])["wemask"]["dims"]
    # mixed_precision: bf16 under ZeRO is bf16 weights (float32 masters in the ZeRO optimizer), saved bf16; said once
    assert record(outs[stage])["dtypes"] == {"weights": ["bfloat16"], "master": ["float32"], "activations": ["bfloat16"],
                                             "saved": ["bfloat16"]}
    said = "wemask: DeepSpeed ZeRO-3 trains and saves bfloat16 weights (the optimizer's master copy: float32); DDP and FSDP"
    assert log.count(said) == 3  # once per run, by rank 0


def test_zero3_saves_whole_weights(zero3, tiny_model_dir):
    from safetensors.torch import load_file

    _, outs, _ = zero3
    saved = load_file(outs["sft"] / "model.safetensors")
    original = load_file(Path(tiny_model_dir) / "model.safetensors")
    assert {k: v.shape for k, v in saved.items() if k in original} == {k: v.shape for k, v in original.items() if k in saved}


def test_zero3_with_4bit_is_one_line(zero3):
    probe, _, log = zero3
    assert [(probe / f"0-exit-{rank}").read_text() for rank in (0, 1)] == ["2", "2"]
    lines = [line for line in log.splitlines() if "--load-in-4bit and DeepSpeed ZeRO-3" in line]
    assert len(lines) == 1 and lines[0].startswith("wemask: error:")
    assert not (probe / "0-0.json").exists()


def test_ddp_recipe_trains_in_its_bf16_and_says_so(tmp_path, tiny_model_dir):
    out = tmp_path / "ddp"
    log = launch("ddp.yaml", tmp_path / "probe", [sft(tiny_model_dir, out)])
    for rank in probed(tmp_path / "probe", 0):
        assert rank["compute_dtypes"] == ["torch.bfloat16"], log[-3000:]
        assert all(w["numel_at_start"] > 0 and w["ds_numel"] is None for w in rank["weights"].values())  # whole copies
    facts = record(out)["distributed"]
    assert facts["type"] == {"value": "MULTI_CPU", "source": "accelerate launch"}
    assert facts["sharding"] == {"value": "DDP", "source": "accelerate launch"} and facts["world_size"]["value"] == 2
    assert facts["precision"] == LAUNCHED_BF16 and record(out)["trl_args"]["bf16"] is True
    assert record(out)["dtypes"] == {"weights": ["float32"], "master": ["float32"], "activations": ["bfloat16"], "saved": ["float32"]}
    assert "DeepSpeed ZeRO" not in log


def test_zero2_saves_tied_weights_once_and_records_its_bf16_weights(tmp_path, tiny_tokenizer):
    """ZeRO-2 gives save_pretrained a copy of every tensor: a tied lm_head.weight was saved as a second embedding."""
    from conftest import make_tiny_model
    from safetensors import safe_open

    tied = tmp_path / "tied"
    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer), tie_word_embeddings=True)
    model.save_pretrained(tied)
    tiny_tokenizer.save_pretrained(tied)
    out = tmp_path / "zero2"
    log = launch("zero2.yaml", tmp_path / "probe", [sft(str(tied), out)])
    probed(tmp_path / "probe", 0)
    with safe_open(out / "model.safetensors", "pt") as weights:
        assert "model.embed_tokens.weight" in weights.keys() and "lm_head.weight" not in weights.keys(), log[-3000:]
    assert record(out)["dtypes"] == {"weights": ["bfloat16"], "master": ["float32"], "activations": ["bfloat16"], "saved": ["bfloat16"]}
    assert log.count("wemask: DeepSpeed ZeRO-2 trains and saves bfloat16 weights (the optimizer's master copy: float32)") == 1
