"""`wemask rloo --use-vllm` (TRL's colocate mode) on the real embedded model and TRL's real RLOOTrainer: the rollouts
come from TRL's in-process vLLM engine holding the trained model's mask, whose weights TRL syncs every step, as for
grpo (tests/test_grpo_vllm.py, whose run and observation this module reuses). One aware run at r = 1 from the CLI."""

from __future__ import annotations

import gc
import json

import pytest
import torch
from test_grpo_vllm import MATH, TRL_FLAGS, VARIED_REWARD, train
from vllm_support import ME_LAYER, require_vllm

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.train.rloo import RLOOStage


@pytest.fixture(scope="module")
def aware(tmp_path_factory, embedded_dir, embedded):
    require_vllm()
    gc.collect()  # an engine another module left for the collector would tear down ours when collected
    folder = tmp_path_factory.mktemp("rloo-vllm")
    (folder / "rewards.py").write_text(VARIED_REWARD)
    attention = embedded.model.model.layers[ME_LAYER].self_attn
    start = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]).detach().clone()
    argv = ["--model", embedded_dir, "--dataset", MATH, "--reward", f"{folder / 'rewards.py'}:varied", "--use-vllm", *TRL_FLAGS,
            "--output-dir", str(folder / "aware"), "--mask-rate", "1.0", "--me-layer", str(ME_LAYER), "--learning-rate", "1e-4"]  # fmt: skip
    return train(argv, start, RLOOStage), folder / "aware"


def test_aware_rloo_rollouts_in_vllm_carry_the_trained_models_mask(aware):
    """At temperature 0 and r = 1, after the last weight sync: vLLM's rollouts are the masked model's generate(),
    not the unmasked one's; the engine holds the trained dims; the separate reference is masked too."""
    seen, out = aware
    assert seen.code == 0
    assert seen.engine_mask == seen.config.dims and min(seen.engine_mask) == ME_LAYER and seen.weights_moved
    assert seen.vllm_tokens == seen.masked_tokens and seen.vllm_tokens != seen.unmasked_tokens
    metrics = json.loads((out / "metrics.json").read_text())
    layers = list(range(ME_LAYER, 30))
    assert metrics["global_step"] == 2 and metrics["masked_layers"] == {"policy": layers, "reference": layers}
    assert abs(metrics["first_step"]["kl"]) < 1e-6 and WeMaskConfig.load(out).dims == seen.config.dims
    print(f"\nRLOO with vLLM rollouts: first step {metrics['first_step']}, runtime {metrics['runtime_s']} s")
