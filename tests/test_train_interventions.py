"""The sink paper's remedies in training: flags from the interventions registry, installed on the trained model,
trained (also under LoRA), saved with every checkpoint and the output, restored on --resume and when continuing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_main
from transformers import TrainerCallback

from wemask_cli.interventions import INTERVENTIONS_FILE, WEIGHTS_FILE, load_saved
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.records import loss_history
from wemask_cli.train.resolve import resolve
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL = ["--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "64", "--learning-rate", "1e-2",
       "--seed", "0", "--report-to", "none", "--max-steps", "3", "--save-steps", "1"]  # fmt: skip
GATED = {"gated_norm": "both", "gated_norm_rank": 4}


def sft(out, model, *extra, remedies=None, callbacks=None, **options):
    options = TrainOptions(model=model, output_dir=str(out), dataset=DATA, intervention_options=remedies or {}, **options)
    return run(SFTStage(), options, [*TRL, *extra], callbacks=callbacks)


class StopAt2(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == 2


def gate_weights(result) -> dict:
    return {k: v.clone() for k, v in result.stage.installation.remedies.state_dict().items()}


def test_lora_and_gated_norm_train_the_gates_save_them_and_resume_restores_them(tmp_path, tiny_model_dir):
    straight = sft(tmp_path / "straight", tiny_model_dir, remedies=GATED, use_peft=True, lora_r=4)
    gates = gate_weights(straight)
    ups = [v for k, v in gates.items() if k.endswith(".up")]
    assert ups and all(bool(v.abs().sum() > 0) for v in ups)  # W_up starts at 0: the gates trained under LoRA
    for folder in (tmp_path / "straight", tmp_path / "straight" / "checkpoint-3"):
        saved = load_saved(folder)
        assert [c.kind for c in saved.configs] == ["wemask", "gated_norm"] and saved.remedies[0].rank == 4
        assert (folder / WEIGHTS_FILE).is_file() and (folder / "adapter_model.safetensors").is_file()
    assert all(torch.equal(load_saved(tmp_path / "straight").weights[k], v) for k, v in gates.items())
    record = json.loads((tmp_path / "straight" / "wemask_run.json").read_text())
    assert record["interventions"][0]["kind"] == "gated_norm"

    out = tmp_path / "resumed"
    sft(out, tiny_model_dir, remedies=GATED, use_peft=True, lora_r=4, callbacks=[StopAt2()])
    (out / "metrics.json").unlink()  # as if killed after checkpoint-2
    resumed = sft(out, tiny_model_dir, use_peft=True, lora_r=4, resume=True)  # the checkpoint's remedies, no flags
    assert [c.kind for c in resumed.stage.installation.remedies.configs] == ["gated_norm"]
    assert [loss for _, loss in loss_history(resumed.trainer)] == pytest.approx([loss for _, loss in loss_history(straight.trainer)], rel=1e-6)
    for key, value in gate_weights(resumed).items():
        assert torch.allclose(value, gates[key], atol=1e-6), key


def test_continuing_a_saved_run_reinstalls_its_remedies_and_refuses_others(tmp_path, tiny_model_dir):
    first = sft(tmp_path / "first", tiny_model_dir, remedies={"pre_affine": "attn"})
    trained = gate_weights(first)
    again = sft(tmp_path / "again", str(tmp_path / "first"), "--learning-rate", "0")
    assert [c.kind for c in again.stage.installation.remedies.configs] == ["pre_affine"]
    assert all(torch.equal(gate_weights(again)[k], v) for k, v in trained.items())
    with pytest.raises(WeMaskError, match="carries PreAffine.*but the flags ask for GatedNorm"):
        sft(tmp_path / "other", str(tmp_path / "first"), remedies=GATED)


def test_remedy_flags_and_recipe_keys_reach_the_run(monkeypatch, capsys, tmp_path, tiny_model_dir):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("gated_norm: attn\ngated_norm_rank: 2\n")
    resolved = resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir="o"), [])
    assert [(c.kind, c.norms, c.rank) for c in resolved.remedies] == [("gated_norm", "attn", 2)]
    recipe.write_text('gated_norm_rank: "2"\n')
    with pytest.raises(WeMaskError, match="line 1: gated_norm_rank must be an integer"):
        resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir="o"), [])
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "-o", str(tmp_path / "o"),
                            "--gated-attention", "--gated-attention-rank", "2", *TRL[:-4], "--max-steps", "1")  # fmt: skip
    assert code == 0, err
    assert [c.kind for c in load_saved(tmp_path / "o").configs] == ["wemask", "gated_attention"]
    assert (tmp_path / "o" / INTERVENTIONS_FILE).is_file()


@pytest.mark.embedded
def test_every_remedy_at_learning_rate_0_starts_exactly_like_plain_trl(tmp_path, embedded_dir):
    """Each remedy starts as the identity: the first training loss equals TRL's own on the embedded model."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    common = dict(per_device_train_batch_size=2, logging_steps=1, max_length=64, learning_rate=0.0, seed=0, max_steps=1)
    args = SFTConfig(output_dir=str(tmp_path / "plain"), use_cpu=True, bf16=False, gradient_checkpointing=False,
                     report_to="none", save_strategy="no", **common)  # fmt: skip
    plain = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(embedded_dir, dtype=torch.float32), args=args,
        train_dataset=load_dataset("json", data_files=DATA, split="train"), processing_class=AutoTokenizer.from_pretrained(embedded_dir),
    )
    plain.train()
    flags = [item for key, value in common.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    remedies = {"gated_norm": "both", "pre_affine": "both", "gated_attention": True}
    ours = run(SFTStage(), TrainOptions(model=embedded_dir, output_dir=str(tmp_path / "ours"), dataset=DATA, dtype="float32",
                                        intervention_options=remedies, stage_options={"train_on_prompt": True}),  # TRL's default loss
               [*flags, "--report-to", "none", "--save-strategy", "no"])  # fmt: skip
    assert [c.kind for c in ours.stage.installation.remedies.configs] == ["gated_norm", "pre_affine", "gated_attention"]
    assert loss_history(ours.trainer)[0][1] == loss_history(plain)[0][1]
