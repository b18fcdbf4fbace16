"""The remedies' weights are saved once, in interventions.safetensors: a full fine-tuning's model.safetensors (output
and checkpoints) holds the base architecture only, so plain transformers loads it cleanly (without the remedies),
while `wemask infer/eval`, --resume and --load-best-model-at-end still restore them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open
from test_train_interventions import DATA, StopAt2, gate_weights, sft
from transformers import AutoModelForCausalLM

from wemask_cli.interventions import load_saved
from wemask_cli.models.loading import load_model
from wemask_cli.train.records import loss_history

ALL = {"gated_norm": "both", "gated_norm_rank": 4, "pre_affine": "both", "gated_attention": True, "gated_attention_rank": 4}


def saved_keys(folder: Path, name: str = "model.safetensors") -> list[str]:
    with safe_open(str(folder / name), "pt") as weights:
        return list(weights.keys())


def logits(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(["What is 12 plus 30? The answer is"], return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("full") / "run"
    return out, sft(out, tiny_model_dir, remedies=ALL)


def test_a_full_fine_tuning_saves_the_base_architecture_only(full_run):
    out, result = full_run
    for folder in (out, out / "checkpoint-3", out / "checkpoint-1"):
        assert not [k for k in saved_keys(folder) if "wemask" in k], folder
        model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
        assert info["missing_keys"] == set() and info["unexpected_keys"] == set() and not info["mismatched_keys"], info
        remedies = load_saved(folder).weights
        assert len(remedies) == 32  # GatedNorm 2x2 + PreAffine 2x1 + gated attention 2, on each of 4 layers
    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    trained = result.trainer.model.eval()
    assert not torch.allclose(logits(plain, result.trainer.processing_class), logits(trained, result.trainer.processing_class))


def test_wemask_loads_the_run_with_its_remedies_exactly(full_run):
    out, result = full_run
    loaded = load_model(str(out), dtype="float32")
    assert [c.kind for c in loaded.installed.configs] == ["gated_norm", "pre_affine", "gated_attention"]
    trained = result.trainer.model.eval()
    assert torch.equal(logits(loaded.model, loaded.tokenizer), logits(trained, loaded.tokenizer))


def test_resuming_a_full_fine_tuning_restores_the_remedies_without_a_missing_keys_warning(monkeypatch, tmp_path, tiny_model_dir, full_run):
    straight = full_run[1]
    warnings = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", lambda message, *a, **k: warnings.append(str(message)))
    out = tmp_path / "resumed"
    sft(out, tiny_model_dir, remedies=ALL, callbacks=[StopAt2()])
    (out / "metrics.json").unlink()  # as if killed after checkpoint-2
    resumed = sft(out, tiny_model_dir, resume=True)
    assert not [w for w in warnings if "missing keys" in w], warnings
    assert [loss for _, loss in loss_history(resumed.trainer)] == pytest.approx([loss for _, loss in loss_history(straight.trainer)], rel=1e-5)
    expected = gate_weights(straight)
    for key, value in gate_weights(resumed).items():
        assert torch.allclose(value, expected[key], atol=1e-6), key


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_load_best_model_at_end_restores_the_best_checkpoints_remedies(tmp_path, tiny_model_dir, lora):
    # "best" = the highest eval loss (greater_is_better), so it is an early checkpoint, not the last step
    best = ["--eval-strategy", "steps", "--eval-steps", "1", "--load-best-model-at-end", "true",
            "--metric-for-best-model", "loss", "--greater-is-better", "true"]  # fmt: skip
    peft = dict(use_peft=True, lora_r=4) if lora else {}
    result = sft(tmp_path / "best", tiny_model_dir, *best, remedies=ALL, eval_dataset=DATA, **peft)
    checkpoint = result.trainer.state.best_model_checkpoint
    assert checkpoint and not checkpoint.endswith("checkpoint-3")
    best_weights = load_saved(checkpoint).weights
    last_weights = load_saved(Path(checkpoint).parent / "checkpoint-3").weights
    assert any(not torch.equal(best_weights[k], last_weights[k]) for k in best_weights)
    final = result.stage.installation.remedies.state_dict()
    assert all(torch.equal(final[k], best_weights[k]) for k in best_weights)
    assert all(torch.equal(load_saved(tmp_path / "best").weights[k], best_weights[k]) for k in best_weights)  # the output's
    if not lora:
        assert not [k for k in saved_keys(tmp_path / "best") if "wemask" in k]
    else:
        assert not [k for k in saved_keys(tmp_path / "best", "adapter_model.safetensors") if "wemask" in k]


def test_an_installation_keeps_its_tensors_out_of_save_pretrained_until_removed(tmp_path):
    from conftest import make_tiny_model
    from peft import LoraConfig, get_peft_model

    from wemask_cli.interventions import install_all
    from wemask_cli.interventions.gated_norm import GatedNorm

    model = make_tiny_model()
    installation = install_all(model, [GatedNorm(norms="attn", rank=2)])
    model.save_pretrained(tmp_path / "with")
    assert len(installation.parameters()) == 8 and not [k for k in saved_keys(tmp_path / "with") if "wemask" in k]
    installation.remove()
    assert model._keys_to_ignore_on_save == set()
    peft = get_peft_model(make_tiny_model(), LoraConfig(r=2, target_modules=["q_proj"]))
    on_peft = install_all(peft, [GatedNorm(norms="attn", rank=2)])
    base = peft.get_base_model()
    assert len(base._keys_to_ignore_on_save) == 8 and all(".wemask_gated_norm_attn." in k for k in base._keys_to_ignore_on_save)
    on_peft.remove()
    assert base._keys_to_ignore_on_save == set()
