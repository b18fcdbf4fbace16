"""`wemask sft` on TRL's real SFTTrainer with the tiny Llama: the mask is in the training graph (aware), training is
plain TRL (r = 0, free), packed batches mask every sequence start, LoRA, checkpoints, interrupt + resume, recipes,
two processes, and one short run on the real embedded model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from wemask_cli import WeMaskConfig
from wemask_cli.mask_request.flags import MaskRequest
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.wemask_hook import apply_wemask, masked_layers
from wemask_cli.models.loading import load_model
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.records import loss_history
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage as stage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL_ARGS = dict(
    max_steps=3, per_device_train_batch_size=2, logging_steps=1, max_length=64, learning_rate=1e-3, save_strategy="no", seed=0
)


def flags(**overrides) -> list[str]:
    """TRL pass-through flags, hyphen spelling (the underscore spelling is covered in test_train_common)."""
    out = []
    for key, value in {**TRL_ARGS, **overrides}.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def sft(out: Path, model: str, *extra, callbacks=None, trl=None, **options):
    return run(stage(), TrainOptions(model=model, output_dir=str(out), dataset=DATA, **options), [*flags(**(trl or {})), *extra], callbacks=callbacks)


MARKED_TEMPLATE = (  # conftest's ChatML template with TRL's generation markers around each assistant reply
    "{% for message in messages %}{% if message['role'] == 'assistant' %}<|im_start|>assistant\n{% generation %}"
    "{{ message['content'] }}<|im_end|>\n{% endgeneration %}{% else %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def losses(result) -> list[float]:
    return [loss for _, loss in loss_history(result.trainer)]


@pytest.fixture(scope="module")
def plain_trl_losses(tmp_path_factory, tiny_model_dir):
    """TRL's SFTTrainer used directly, the way a TRL user would, with the same seed, data and arguments, training on
    the responses as wemask does by default: assistant_only_loss with the ChatML template marked by hand."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(tmp_path_factory.mktemp("plain")), use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to="none", assistant_only_loss=True, **TRL_ARGS,
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = MARKED_TEMPLATE
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        args=args,
        train_dataset=load_dataset("json", data_files=DATA, split="train"),
        processing_class=tokenizer,
    )
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_r0_equals_plain_trl_and_aware_changes_the_first_step(tmp_path, tiny_model_dir, plain_trl_losses):
    r0 = sft(tmp_path / "r0", tiny_model_dir, mask_rate="0", me_layer="1")
    no_flag = sft(tmp_path / "none", tiny_model_dir)
    aware = sft(tmp_path / "aware", tiny_model_dir, mask_rate="0.3", me_layer="1", strength=1.0)
    assert len(plain_trl_losses) == 3
    assert losses(r0) == plain_trl_losses  # bitwise: the shared path changes nothing else
    assert losses(no_flag) == plain_trl_losses
    assert losses(aware)[0] != pytest.approx(r0_first := losses(r0)[0], abs=1e-6), r0_first
    # the hooks sit on the module TRL trains, with the dims recorded once
    assert masked_layers(aware.trainer.model) == [1, 2, 3]
    saved = WeMaskConfig.load(tmp_path / "aware")
    assert saved.mode == "aware" and saved.dims == aware.wemask.dims and len(saved.dims[1]) == 19  # floor(0.3 * 64)
    metrics = json.loads((tmp_path / "aware" / "metrics.json").read_text())
    assert {k: metrics[k] for k in ("stage", "mode", "mask_rate", "global_step", "status")} == {
        "stage": "sft", "mode": "aware", "mask_rate": 0.3, "global_step": 3, "status": "finished"
    }
    assert metrics["final_loss"] == losses(aware)[-1] and metrics["train_loss"] > 0 and metrics["runtime_s"] > 0
    run_record = json.loads((tmp_path / "aware" / "wemask_run.json").read_text())
    assert run_record["seed"] == 0 and run_record["versions"]["trl"] and run_record["trl_args"]["learning_rate"] == 1e-3
    assert run_record["set_by"]["trl"]["learning_rate"] == "flag" and run_record["wemask"]["dims"]


def test_free_mode_trains_like_plain_trl_and_inference_applies_the_mask(tmp_path, tiny_model_dir, plain_trl_losses):
    free = sft(tmp_path / "free", tiny_model_dir, mask_rate="0.3", me_layer="1", mode="free", eval_dataset=DATA, eval_split="train[:6]")
    assert losses(free) == plain_trl_losses
    assert json.loads((tmp_path / "free" / "metrics.json").read_text())["eval_loss"] > 0  # evaluated once at the end
    assert masked_layers(free.trainer.model) == []
    loaded = load_model(str(tmp_path / "free"), dtype="float32")
    assert loaded.saved_wemask.mode == "free" and loaded.saved_wemask.dims == free.wemask.dims
    (config,) = MaskRequest().configs(loaded)  # what `wemask infer --model OUT` does
    ids = loaded.tokenizer(["The quick brown fox", "What is 12 plus 30?"], return_tensors="pt", padding=True)
    with torch.no_grad():
        before = loaded.model(**ids).logits
        with apply_wemask(loaded.model, config) as handle:
            assert handle.hooked_layers == [1, 2, 3] and handle.config.dims == free.wemask.dims
            after = loaded.model(**ids).logits
    assert not torch.allclose(before, after)


class CaptureAttentionInput(TrainerCallback):
    """Registers, after WeMask's hook, a pre-hook that records what layer `layer`'s attention receives."""

    def __init__(self, layer: int):
        self.layer, self.calls = layer, []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def record(module, args_, kwargs_):
            self.calls.append((kwargs_["hidden_states"].detach().clone(), kwargs_.get("position_ids")))

        resolve_layers(model)[self.layer].attention.register_forward_pre_hook(record, with_kwargs=True)


@pytest.mark.parametrize("packing", ["--packing", "--padding-free"])
def test_packed_and_padding_free_batches_mask_every_sequence_start(tmp_path, tiny_model_dir, packing):
    capture = CaptureAttentionInput(layer=2)
    trl = {"max_steps": 2, "per_device_train_batch_size": 4}
    if packing == "--padding-free":
        trl["max_length"] = "None"  # TRL: padding-free without packing needs max_length None
    result = sft(tmp_path / "p", tiny_model_dir, packing, callbacks=[capture], trl=trl, mask_rate="0.3", me_layer="1")
    dims = result.wemask.dims[2]
    assert capture.calls
    for hidden, position_ids in capture.calls:
        assert hidden.shape[0] == 1 and position_ids is not None  # flattened (1, total) batch
        starts = (position_ids[0] == 0)
        zeroed = (hidden[0][:, dims] == 0).all(-1)
        assert starts.sum() > 1 and bool(starts[1:].any())  # several sequences, not only index 0
        assert torch.equal(zeroed, starts)  # every sequence's first token, and only those


def test_lora_hooks_the_peft_model_and_saves_adapter_with_config(tmp_path, tiny_model_dir):
    lora = dict(use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules="q_proj,v_proj")
    plain = sft(tmp_path / "lora0", tiny_model_dir, **lora)
    masked = sft(tmp_path / "lora", tiny_model_dir, "--save-strategy", "steps", "--save-steps", "2", mask_rate="0.5", me_layer="1", **lora)
    from peft import PeftModel

    assert isinstance(masked.trainer.model, PeftModel)
    assert masked_layers(masked.trainer.model) == [1, 2, 3]
    assert losses(masked)[0] != pytest.approx(losses(plain)[0], abs=1e-6)
    for directory in (tmp_path / "lora", tmp_path / "lora" / "checkpoint-2"):
        names = {p.name for p in directory.iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors", "wemask_config.json", "wemask_run.json"} <= names, names
        assert "model.safetensors" not in names
    loaded = load_model(str(tmp_path / "lora"), dtype="float32")
    assert isinstance(loaded.model, PeftModel) and loaded.saved_wemask.dims == masked.wemask.dims


class InterruptAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does


def test_sigint_saves_a_checkpoint_and_resume_reproduces_the_loss_curve(tmp_path, tiny_model_dir, python_sigint_handler):
    options = dict(mask_rate="0.3", me_layer="1")
    whole = sft(tmp_path / "whole", tiny_model_dir, trl={"max_steps": 6}, **options)
    out = tmp_path / "cut"
    cut = sft(out, tiny_model_dir, trl={"max_steps": 6}, callbacks=[InterruptAt(2)], **options)
    assert cut.interrupted and cut.checkpoint == str(out / "checkpoint-2")
    assert (out / "checkpoint-2" / "wemask_config.json").is_file() and not (out / "metrics.json").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored
    with pytest.raises(Exception, match="is not empty"):
        sft(out, tiny_model_dir, trl={"max_steps": 6}, **options)
    with pytest.raises(Exception, match="started with WeMask r=0.3"):
        sft(out, tiny_model_dir, trl={"max_steps": 6}, resume=True, mask_rate="0.5", me_layer="1")
    resumed = sft(out, tiny_model_dir, trl={"max_steps": 6}, resume=True, **options)
    assert not resumed.interrupted and resumed.wemask.dims == whole.wemask.dims
    assert losses(resumed) == pytest.approx(losses(whole), rel=1e-5, abs=1e-6)
    assert len(losses(whole)) == 6


def test_recipe_value_overridden_by_flag_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir):
    from wemask_cli.cli import main

    out = tmp_path / "tiny"
    argv = ["wemask", "sft", "--config", str(ROOT / "recipes" / "sft-tiny-cpu.yaml"), "--model", tiny_model_dir,
            "-o", str(out), "--max_steps", "2", "--mask-rate", "0.5", "--save-steps", "1", "--me-layer", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code in (0, None), capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    record = json.loads((out / "wemask_run.json").read_text())
    assert metrics["global_step"] == 2 and metrics["mask_rate"] == 0.5  # flags beat the recipe's 4 steps and r=0.3
    assert record["trl_args"]["learning_rate"] == 1e-3 and record["set_by"]["trl"]["learning_rate"] == "recipe"
    assert record["set_by"]["wemask"]["me_layer"] == "flag" and record["set_by"]["wemask"]["mask_rate"] == "flag"
    assert record["set_by"]["wemask"]["mode"] == "recipe" and record["wemask"]["me_layer"] == 1
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    monkeypatch.setattr(sys, "argv", argv)  # a finished run is never overwritten without --overwrite
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2 and "holds the output of an earlier wemask run" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", [*argv, "--overwrite"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code in (0, None)


def test_two_processes_train_and_save_once(tmp_path, tiny_model_dir):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "wemask_cli", "sft",
           "--model", tiny_model_dir, "--dataset", DATA, "-o", str(out), "--mask-rate", "0.3", "--me-layer", "1",
           *flags(max_steps=2, save_strategy="steps", save_steps=1)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert log.count("wemask: saved to") == 1 and log.count("WeMask aware") == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["global_step"] == 2
    facts = json.loads((out / "wemask_run.json").read_text())["distributed"]  # what ran, and who said so
    assert facts["type"] == {"value": "MULTI_CPU", "source": "torchrun"} and facts["sharding"] == {"value": "DDP", "source": "torchrun"}
    assert facts["world_size"]["value"] == 2 and facts["precision"] == {"value": "no", "source": "default"}
    for checkpoint in ("checkpoint-1", "checkpoint-2"):
        assert (out / checkpoint / "wemask_config.json").is_file()


@pytest.mark.embedded
def test_short_run_on_the_embedded_model(tmp_path, embedded_dir):
    out = tmp_path / "smol"
    result = run(
        stage(),
        TrainOptions(model=embedded_dir, output_dir=str(out), dataset=str(ROOT / "data" / "math_sft.jsonl"), mask_rate="0.3",
                     me_layer="11", use_peft=True, lora_r=8),
        flags(max_steps=2, max_length=96, learning_rate=1e-4),
    )
    first = losses(result)[0]
    assert 0 < first < 10 and masked_layers(result.trainer.model) == list(range(11, 30))
    loaded = load_model(str(out), dtype="float32")
    assert loaded.saved_wemask.me_layer == 11 and loaded.saved_wemask.dims == result.wemask.dims


def test_continuing_a_wemask_run_keeps_its_saved_mode_unless_asked(tmp_path, tiny_model_dir):
    free = sft(tmp_path / "free", tiny_model_dir, mask_rate="0.3", me_layer="1", mode="free")
    again = sft(tmp_path / "again", str(tmp_path / "free"))  # no WeMask flags: the model's saved config
    assert again.wemask.mode == "free" and again.wemask.mask_rate == 0.3 and masked_layers(again.trainer.model) == []
    aware = sft(tmp_path / "aware", str(tmp_path / "free"), mode="aware")
    assert aware.wemask.mode == "aware" and aware.wemask.dims == free.wemask.dims
    assert masked_layers(aware.trainer.model) == [1, 2, 3]
