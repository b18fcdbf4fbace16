"""QLoRA wherever bitsandbytes runs (CUDA, and the CPU from bitsandbytes 0.49): 4-bit and 8-bit loading with a device
map that makes no CUDA call without CUDA, refusals only where bitsandbytes cannot run, and on the embedded model one
4-bit aware SFT step whose adapter `wemask infer` reloads with its mask."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import torch
from conftest import run_main

from wemask_cli.errors import WeMaskError
from wemask_cli.method.mask import masked_layers
from wemask_cli.models import load_model
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
bnb = pytest.importorskip("bitsandbytes")
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


@pytest.mark.embedded
def test_one_4bit_aware_sft_step_and_infer_reloads_the_masked_adapter(monkeypatch, capsys, tmp_path, embedded_dir):
    out = tmp_path / "qlora"
    result = run(
        SFTStage(),
        TrainOptions(model=embedded_dir, output_dir=str(out), dataset=str(ROOT / "data" / "math_sft.jsonl"), mask_rate="0.3",
                     me_layer="11", use_peft=True, lora_r=8, load_in_4bit=True),
        ["--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64", "--logging-steps", "1",
         "--save-strategy", "no", "--report-to", "none"],
    )
    model = result.trainer.model
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())  # the base really is 4-bit
    err = capsys.readouterr().err
    assert err.count("4-bit on CPU: ") == 1 and "Failed to load CPU gemm_4bit_forward" not in err  # one wemask line
    assert masked_layers(model) == list(range(11, 30))  # the mask's hooks sit on the 4-bit model
    assert 0 < result.metrics["final_loss"] < 20 and result.metrics["peft"]
    assert (out / "adapter_model.safetensors").is_file()
    code, stdout, err = run_main(monkeypatch, capsys, "infer", "--model", str(out), "--prompt", "What is 2 + 3?", "--max-new-tokens", "4")
    assert code == 0, err
    assert "r=0.3" in stdout  # infer applied the mask the adapter carries
    reloaded = load_model(str(out), dtype="float32")
    assert reloaded.saved_wemask.me_layer == 11 and reloaded.saved_wemask.dims == result.wemask.dims
