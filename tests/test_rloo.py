"""`wemask rloo` on TRL's real RLOOTrainer: in aware mode the rollouts, the loss, old-policy and reference passes mask
the same first real token (the reference masked like the policy, so the first KL is 0); free mode trains unmasked;
r = 0 is plain TRL RLOO; bad rewards and data are one line before the model loads; one CLI step on the embedded
model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_main
from test_grpo import ME, Capturing, flags, plain_trl_run, write_length_reward, write_prompts

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.models import loading as models_module
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.rloo import RLOOStage
from wemask_cli.train.run import run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> str:
    return write_prompts(tmp_path_factory.mktemp("rloo-data"))


@pytest.fixture(scope="module")
def length_reward(tmp_path_factory) -> str:
    return write_length_reward(tmp_path_factory.mktemp("rloo-rewards"))


class CapturingRLOO(Capturing, RLOOStage):
    """The RLOO stage with a MaskCapture (tests/test_grpo.py)."""


def train(tmp_path, name, model, dataset, reward, *trl, **options):
    return run(
        RLOOStage() if "captures" not in options else CapturingRLOO(options.pop("captures")),
        TrainOptions(model=model, output_dir=str(tmp_path / name), dataset=dataset, me_layer=str(ME),
                     stage_options={"reward": [reward]}, **options),
        flags(**dict(trl)),
    )  # fmt: skip


def test_aware_masks_rollouts_loss_old_policy_and_reference_on_the_same_tokens(tmp_path, tiny_model_dir, prompts_file, length_reward):
    captures = []
    # RLOO's default --beta 0.05 builds a separate reference; num_iterations 2 adds the old-policy log-prob pass.
    result = train(tmp_path, "aware", tiny_model_dir, prompts_file, length_reward, ("num_iterations", 2), mask_rate="0.5",
                   captures=captures)
    (capture,) = captures
    assert masked_layers(result.trainer.model) == [1, 2, 3] and masked_layers(result.trainer.ref_model) == [1, 2, 3]
    for record in capture.records:
        if record["ids"].shape[1] > 1:  # every row of every full forward: exactly one masked token
            assert record["masked"].sum(-1).tolist() == [1] * record["ids"].shape[0], record["phase"]
    assert any((r["mask"][:, 0] == 0).any() for r in capture.records if r["phase"] == "loss")  # left-padded rows
    rollout = capture.masked_tokens("generate")
    assert rollout == {(p, 0, p[0]) for p in capture.generated_prompts} and len({len(p) for p in capture.generated_prompts}) > 1
    assert capture.masked_tokens("loss") == rollout and capture.masked_tokens("logp") == rollout
    assert capture.masked_tokens("logp", model="ref") == rollout
    metrics = json.loads((tmp_path / "aware" / "metrics.json").read_text())
    assert metrics["stage"] == "rloo" and metrics["rewards"] == ["length_reward"] and metrics["reference"] == "separate model"
    assert metrics["masked_layers"] == {"policy": [1, 2, 3], "reference": [1, 2, 3]}
    assert metrics["first_step"]["kl"] == 0.0  # the reference computes with the policy's mask
    assert WeMaskConfig.load(tmp_path / "aware").dims == result.wemask.dims


def test_free_mode_is_plain_rloo_with_the_mask_recorded(tmp_path, tiny_model_dir, prompts_file, length_reward):
    captures = []
    result = train(tmp_path, "free", tiny_model_dir, prompts_file, length_reward, ("max_steps", 1), mask_rate="0.5",
                   mode="free", captures=captures)
    (capture,) = captures
    assert {r["phase"] for r in capture.records} >= {"generate", "loss"} and {r["model"] for r in capture.records} == {"policy", "ref"}
    assert not any(r["masked"].any() for r in capture.records)  # neither rollouts, loss nor reference are masked
    assert masked_layers(result.trainer.model) == [] and masked_layers(result.trainer.ref_model) == []
    saved = WeMaskConfig.load(tmp_path / "free")
    assert saved.mode == "free" and saved.mask_rate == 0.5 and sorted(saved.dims) == [1, 2, 3]


def test_r0_equals_plain_trl_rloo(tmp_path, tiny_model_dir, prompts_file, length_reward):
    from transformers import AutoModelForCausalLM
    from trl import RLOOConfig, RLOOTrainer

    ours = train(tmp_path, "r0", tiny_model_dir, prompts_file, length_reward, mask_rate="0")
    plain = plain_trl_run(RLOOTrainer, RLOOConfig, tmp_path / "plain", tiny_model_dir, prompts_file, length_reward)

    def logged(trainer):
        keys = ("loss", "reward", "reward_std", "kl", "completions/mean_length", "entropy", "grad_norm")
        return [{k: e[k] for k in keys} for e in trainer.state.log_history if "reward" in e]

    print(f"\nRLOO r = 0: wemask {logged(ours.trainer)}\nplain TRL {logged(plain)}")
    assert logged(ours.trainer) == logged(plain) and len(logged(plain)) == 2
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    trained, reference = ours.trainer.model.state_dict(), plain.model.state_dict()
    assert all(torch.equal(trained[k], reference[k]) for k in reference)  # bitwise the same weights
    assert any(not torch.equal(start[k], reference[k]) for k in reference)  # and training did move them


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reward", "missing_file.py:reward"], "reward file 'missing_file.py' does not exist"),
        (["--dataset", "{text_only}"], "which match no rloo format: accepted are prompt (prompt)"),
        (["--num-generations", "3", "--per-device-train-batch-size", "4"], "must be divisible by num_generations"),
    ],
    ids=["missing-reward", "text-data", "generations"],
)
def test_bad_input_is_one_line_exit_2_before_the_model_loads(monkeypatch, capsys, tmp_path, tiny_model_dir, prompts_file, args, message):
    def no_load(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(models_module, "load_model", no_load)
    text_only = tmp_path / "text.jsonl"
    text_only.write_text('{"text": "What is 2 plus 2?"}\n')
    args = [arg.format(text_only=text_only) for arg in args]
    common = ["rloo", "--model", tiny_model_dir, "--dataset", prompts_file, "--output-dir", str(tmp_path / "out")]
    code, _, err = run_main(monkeypatch, capsys, *common, *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("wemask: error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_tiny_recipe_resolves():
    from wemask_cli.train.resolve import resolve

    r = resolve(RLOOStage(), TrainOptions(config=str(ROOT / "recipes" / "rloo-tiny-cpu.yaml"), output_dir="x"), [])
    assert Path(r.opts["dataset"]).is_file() and r.opts["reward"] == ["math", "format:0.5"] and r.opts["mode"] == "aware"
    assert (r.args.num_generations, r.args.beta, r.args.max_completion_length) == (2, 0.05, 8)


@pytest.mark.embedded
def test_embedded_model_rloo_from_the_cli_masks_policy_and_reference(monkeypatch, capsys, tmp_path):
    out = tmp_path / "rloo"
    code, _, err = run_main(
        monkeypatch, capsys, "rloo", "--config", str(ROOT / "recipes" / "rloo-tiny-cpu.yaml"), "-o", str(out),
        "--max-steps", "1", "--report-to", "none",
    )  # fmt: skip
    assert code == 0, err
    assert "rloo reference (separate model): masked like the policy (reference mask same)" in err
    metrics = json.loads((out / "metrics.json").read_text())
    saved = WeMaskConfig.load(out)
    layers = list(range(saved.me_layer, 30))  # SmolLM2-135M: 30 layers, masked from the ME layer on
    assert saved.mode == "aware" and saved.mask_rate == 0.3 and metrics["masked_layers"] == {"policy": layers, "reference": layers}
    assert metrics["global_step"] == 1 and metrics["reference"] == "separate model"
    assert metrics["rewards"] == ["math_reward", "format_reward"] and metrics["reward_weights"] == [1.0, 0.5]
    assert abs(metrics["first_step"]["kl"]) < 1e-6 and len(metrics["reward_history"]) == 1
    print(f"\nembedded RLOO: first step {metrics['first_step']}, runtime {metrics['runtime_s']} s")
