"""QLoRA wherever bitsandbytes runs (CUDA, and the CPU from bitsandbytes 0.49): 4-bit and 8-bit loading with a device
map that makes no CUDA call without CUDA, refusals only where bitsandbytes cannot run, and on the embedded model a
4-bit and an 8-bit aware SFT step whose adapter `wemask infer` reloads as it was trained: on the quantized base, the
adapter in its training dtype, with its mask."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch
from conftest import run_main

from wemask_cli.commands.infer import GenerationSettings, run_infer
from wemask_cli.engines.transformers import TransformersEngine
from wemask_cli.method.wemask_hook import masked_layers, remove_wemask
from wemask_cli.models.loading import LoadedModel, load_model
from wemask_cli.models.quantization import RECORDED
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
bnb = pytest.importorskip("bitsandbytes")
PROMPT = "What is 2 + 3?"
NO_CUDA = not torch.cuda.is_available()


def fake_bitsandbytes(monkeypatch, found: str | None):
    real = importlib.metadata.version

    def version(name):
        if name != "bitsandbytes":
            return real(name)
        if found is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return found

    monkeypatch.setattr(importlib.metadata, "version", version)


@pytest.mark.skipif(not NO_CUDA, reason="the CPU path: a GPU is here")
@pytest.mark.parametrize("bits, layer", [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_quantized_loading_on_the_cpu_makes_no_cuda_call(monkeypatch, tiny_model_dir, bits, layer):
    def no_cuda():
        raise AssertionError("torch.cuda.current_device() called without CUDA")

    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    loaded = load_model(tiny_model_dir, quantization=bits)
    kinds = {type(m).__name__ for m in loaded.model.modules()}
    assert layer in kinds and loaded.model.device.type == "cpu"


@pytest.mark.skipif(not NO_CUDA, reason="the refusal is for machines without CUDA")
@pytest.mark.parametrize(
    "found, message",
    [
        ("0.48.2", "bitsandbytes 0.48.2 runs only on CUDA and no GPU is visible here; its CPU back-end needs bitsandbytes >= 0.49"),
        (None, "--load-in-4bit needs bitsandbytes: pip install"),
    ],
)
def test_refused_only_where_bitsandbytes_cannot_run(monkeypatch, capsys, tmp_path, tiny_model_dir, found, message):
    fake_bitsandbytes(monkeypatch, found)
    with pytest.raises(WeMaskError, match="bitsandbytes"):
        load_model(tiny_model_dir, quantization="4bit")
    args = ["sft", "--model", tiny_model_dir, "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "-o", str(tmp_path / "o"),
            "--use-peft", "--load-in-4bit"]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_locate_eval_and_infer_load_a_qlora_runs_base_as_recorded(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "qlora"
    run(SFTStage(), TrainOptions(model=tiny_model_dir, output_dir=str(out), dataset=str(ROOT / "data" / "sft_chat.jsonl"),
                                 use_peft=True, load_in_4bit=True, bnb_4bit_quant_type="fp4", use_bnb_nested_quant=False),
        ["--max-steps", "1", "--max-length", "32", "--save-strategy", "no", "--report-to", "none"])
    said = f"wemask: {out} trained on a 4-bit (fp4) base (wemask_run.json): loading the base so (--base-quantization none loads"
    commands = {
        "locate": ["--prompts", str(ROOT / "data" / "sft_chat.jsonl"), "--num-prompts", "2"],
        "eval": ["--task", "perplexity", "--data", str(ROOT / "wemask_cli" / "resources" / "eval" / "perplexity.txt"),
                 "--window", "16", "--limit", "1", "--output", str(tmp_path / "eval")],
        "infer": ["--prompt", "hi", "--max-new-tokens", "2"],
    }
    for command, flags in commands.items():
        code, _, err = run_main(monkeypatch, capsys, command, "--model", str(out), *flags)
        assert code == 0 and err.count(said) == 1, err
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "--prompt", "hi", "--base-quantization", "none")
    assert code == 0 and "base (wemask_run.json)" not in err, err
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "--prompt", "hi", "--base-quantization", "3bit")
    assert code == 2 and err.strip() == "wemask: error: --base-quantization '3bit' is not valid: use recorded, none, 4bit, 8bit"
    fake_bitsandbytes(monkeypatch, None)  # a machine where the recorded base cannot load: one line naming the way out
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "--prompt", "hi")
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(f"wemask: error: {out} trained on a 4-bit base (")
    assert "pass --base-quantization none to load the base unquantized" in err


@pytest.mark.embedded
@pytest.mark.parametrize("bits, layer", [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_a_qlora_run_comes_back_in_infer_as_it_was_trained(monkeypatch, capsys, tmp_path, embedded_dir, bits, layer):
    """One aware SFT step on a quantized base, then greedy text: the trained model's (in the training process) and
    `wemask infer --model RUN`'s are the same. infer loaded the base unquantized and PEFT upcast TRL's bfloat16
    adapter: the texts differed, without a word."""
    out = tmp_path / bits
    result = run(
        SFTStage(),
        TrainOptions(model=embedded_dir, output_dir=str(out), dataset=str(ROOT / "data" / "math_sft.jsonl"), mask_rate="0.3",
                     me_layer="11", use_peft=True, lora_r=8, **{f"load_in_{bits}": True}),
        ["--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64", "--logging-steps", "1",
         "--learning-rate", "1e-3", "--save-strategy", "no", "--report-to", "none"],
    )
    model = result.trainer.model
    assert any(type(m).__name__ == layer for m in model.modules())  # the base really is quantized
    err = capsys.readouterr().err
    assert err.count("4-bit on CPU: ") == (bits == "4bit") and "Failed to load CPU gemm_4bit_forward" not in err
    assert masked_layers(model) == list(range(11, 30))  # the mask's hooks sit on the quantized model
    assert 0 < result.metrics["final_loss"] < 20 and result.metrics["peft"]
    remove_wemask(model)
    settings = GenerationSettings(max_new_tokens=12)
    loaded = LoadedModel(model=model.eval(), tokenizer=result.trainer.processing_class, source=str(out))
    trained = run_infer(TransformersEngine(loaded), [PROMPT], [result.wemask], settings)[0]["completion"]

    def infer(*flags: str) -> tuple[str, str]:
        code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "--prompt", PROMPT, "--max-new-tokens", "12",
                                "-o", str(tmp_path / "infer.jsonl"), "--overwrite", *flags)
        assert code == 0, err
        record = json.loads((tmp_path / "infer.jsonl").read_text())
        assert record["wemask"]["dims"] == result.wemask.to_dict()["dims"]  # infer applied the mask the adapter carries
        return record["completion"], err

    completion, err = infer()
    base = "a 4-bit (nf4, nested)" if bits == "4bit" else "an 8-bit"
    assert f"wemask: {out} trained on {base} base (wemask_run.json): loading the base so (--base-quantization none" in err
    assert completion == trained
    _, err = infer("--base-quantization", "none")
    assert "base (wemask_run.json)" not in err, err
    as_trained, unquantized = load_model(str(out), quantization=RECORDED), load_model(str(out), quantization="none")
    tokens = loaded.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = [m(tokens).logits for m in (model, as_trained.model, unquantized.model)]
    assert torch.equal(logits[0], logits[1]) and not torch.equal(logits[0], logits[2])  # what infer did before: the test can tell
