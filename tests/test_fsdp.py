"""FSDP on the CPU: the accelerate recipe and --fsdp really shard (FSDP2 over gloo) for sft, dpo and grpo, with the
mask on every rank; what cannot shard is refused in one line before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_main

from wemask_cli.mask_request.flags import MaskRequest
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train import fsdp

ROOT = Path(__file__).resolve().parent.parent
DRIVER = str(ROOT / "tests" / "distributed_driver.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
SHORT = ["--max-steps", "2", "--per-device-train-batch-size", "2", "--logging-steps", "1", "--save-strategy", "no"]


def launch(launcher: list[str], jobs: list[dict], tmp_path: Path) -> str:
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    proc = subprocess.run([*launcher, DRIVER, str(jobs_file)], check=False, capture_output=True, text=True, env=ENV, timeout=600, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def probes(directory: Path) -> list[dict]:
    return [json.loads((directory / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def test_the_fsdp_recipe_shards_sft_dpo_and_grpo_on_two_cpu_processes(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch, capsys):
    """accelerate alone would run recipes/accelerate/fsdp.yaml on the CPU as DDP (every rank the whole model). sft
    trains a model with tied embeddings, which FSDP2's gathered state dict used to save twice."""
    from conftest import make_tiny_model
    from safetensors import safe_open

    tied = tmp_path / "tied"
    make_tiny_model("llama", vocab_size=len(tiny_tokenizer), tie_word_embeddings=True).save_pretrained(tied)
    tiny_tokenizer.save_pretrained(tied)
    reward = tmp_path / "rewards.py"
    reward.write_text("def length_reward(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n")
    common = {"model": tiny_model_dir, "mask_rate": "0.3", "me_layer": "1"}
    jobs = [
        {"train": "sft", "options": {**common, "dataset": str(ROOT / "data" / "sft_chat.jsonl"), "output_dir": str(tmp_path / "sft"),
                                     "model": str(tied)},
         "flags": [*SHORT, "--max-length", "64"], "probe": str(tmp_path / "probe-sft")},
        {"train": "dpo", "options": {**common, "dataset": str(ROOT / "data" / "preferences.jsonl"), "output_dir": str(tmp_path / "dpo")},
         "flags": [*SHORT, "--max-length", "96"], "probe": str(tmp_path / "probe-dpo")},
        {"train": "grpo", "options": {**common, "dataset": str(ROOT / "data" / "math_problems.jsonl"), "output_dir": str(tmp_path / "grpo"),
                                      "use_peft": True, "lora_r": 4, "stage_options": {"reward": [f"{reward}:length_reward"]}},
         "flags": [*SHORT, "--num-generations", "2", "--max-completion-length", "6", "--beta", "0.1"], "probe": str(tmp_path / "probe-grpo")},
    ]
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "recipes" / "accelerate" / "fsdp.yaml"),
                  "--num_processes", "2", "--main_process_port", "29631"]
    log = launch(accelerate, jobs, tmp_path)
    assert log.count("wemask: FSDP: rank 0 holds") == 3 and log.count("wemask: saved to") == 3
    for stage in ("sft", "dpo", "grpo"):
        for found in probes(tmp_path / f"probe-{stage}"):
            assert found["distributed_type"] == "DistributedType.FSDP", found
            policy = found["policy"]
            assert policy["type"] == "DTensor" and policy["local_shape"][0] * 2 == policy["shape"][0], policy  # half each
            assert policy["masked_layers"] == [1, 2, 3]  # the mask on every rank
        record = json.loads((tmp_path / stage / "wemask_run.json").read_text())
        assert record["distributed"]["sharding"]["value"] == "FSDP2", record["distributed"]
    with safe_open(tmp_path / "sft" / "model.safetensors", "pt") as weights:
        assert "model.embed_tokens.weight" in weights.keys() and "lm_head.weight" not in weights.keys()
    dtypes = json.loads((tmp_path / "sft" / "wemask_run.json").read_text())["dtypes"]  # bf16 compute over float32 weights
    assert dtypes == {"weights": ["float32"], "master": ["float32"], "activations": ["bfloat16"], "saved": ["float32"]}
    for found in probes(tmp_path / "probe-dpo"):  # DPO's separate reference: sharded and masked like the policy
        assert found["reference"]["type"] == "DTensor" and found["reference"]["masked_layers"] == [1, 2, 3]
    for run in ("sft", "grpo"):  # the saved runs (a full model, a LoRA adapter) reload with infer and their mask
        code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(tmp_path / run), "--prompt", "Hi", "--max-new-tokens", "2")
        assert code == 0 and "r=0.3" in out, err


def test_fsdp_in_one_process_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys, weightless_model_dir):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", weightless_model_dir, "--dataset",
                            str(ROOT / "data" / "sft_chat.jsonl"), "-o", str(tmp_path / "out"), "--fsdp")
    assert code == 2 and err.count("\n") == 1 and "FSDP shards the model across processes and this is one process" in err


def test_a_bare_fsdp_flag_is_fsdp2_without_the_deprecated_string(tmp_path, caplog):
    """transformers 5.20 drops `--fsdp "full_shard auto_wrap"` (a string, deprecated in 5.19+); its current form, a bare
    `--fsdp` (fsdp=True) with --fsdp_config, was refused ("fsdp must be a string")."""
    from wemask_cli.train.options import TrainOptions
    from wemask_cli.train.resolve import resolve
    from wemask_cli.train.sft import SFTStage

    options = TrainOptions(output_dir=str(tmp_path / "o"), dataset=str(ROOT / "data" / "sft_chat.jsonl"))
    current = resolve(SFTStage(), options, ["--fsdp", "--fsdp_config", '{"version": 2, "reshard_after_forward": true}'])
    assert "deprecated" not in caplog.text and current.args.fsdp is True
    old = resolve(SFTStage(), options, ["--fsdp", "full_shard auto_wrap"])
    assert "Passing `fsdp` as a string is deprecated" in caplog.text
    assert current.args.fsdp_plugin_args == old.args.fsdp_plugin_args and fsdp.settings(current.args)["fsdp_version"] == 2


def resolved(mask_rate: str | None, me_layer: str | None, **plugin) -> SimpleNamespace:
    plugin_args = {"fsdp_version": 2, "cpu_ram_efficient_loading": False, **plugin}
    args = SimpleNamespace(fsdp=True, deepspeed=None, world_size=2, use_cpu=True, fsdp_plugin_args=plugin_args)
    return SimpleNamespace(args=args, mask=MaskRequest.parse(mask_rate=mask_rate, me_layer=me_layer))


@pytest.mark.parametrize(
    "settings, plugin, refusal",
    [
        (("0.3", None), {"fsdp_version": 1}, "FSDP version 1 runs on GPUs only"),
        (("0.3", None), {"cpu_ram_efficient_loading": True}, "--me-layer auto cannot locate on FSDP-sharded weights"),
        (("0.3", "auto"), {"cpu_ram_efficient_loading": True}, "--me-layer auto cannot locate on FSDP-sharded weights"),
        (("0.3", "2"), {"cpu_ram_efficient_loading": True}, "WeMask chooses its dims from the norm weights on every rank"),
    ],
)
def test_what_cannot_shard_is_refused_in_one_line(settings, plugin, refusal):
    with pytest.raises(WeMaskError, match=refusal.replace("(", r"\(")) as info:
        fsdp.check(resolved(*settings, **plugin))
    assert "\n" not in str(info.value)


def test_fsdp_with_deepspeed_is_refused_in_one_line():
    both = resolved("0.3", "1")
    both.args.deepspeed = "zero2.json"
    with pytest.raises(WeMaskError, match="FSDP and DeepSpeed both shard the model and exclude each other"):
        fsdp.check(both)


def test_without_a_mask_efficient_loading_is_allowed():
    fsdp.check(resolved(None, None, cpu_ram_efficient_loading=True))
    fsdp.check(resolved("0", None, cpu_ram_efficient_loading=True))
