"""Precision comes from one place: --bf16/--fp16 as switches or with a value, the launcher's mixed precision
(ACCELERATE_MIXED_PRECISION, what `accelerate launch` passes from its config) as the trainer's, and a conflict as one
line naming both settings before any model loads. What ran is checked in tests/test_deepspeed.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.resolve import resolve
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
LAUNCHED_BF16 = "accelerate config (mixed_precision: bf16)"


def resolved(tmp_path, extra, recipe: str | None = None):
    config = None
    if recipe is not None:
        config = tmp_path / "recipe.yaml"
        config.write_text(recipe)
    options = TrainOptions(output_dir=str(tmp_path / "out"), dataset=DATA, config=str(config) if config else None)
    return resolve(SFTStage(), options, extra)


@pytest.fixture
def launched(monkeypatch):
    """As if started by `accelerate launch` with a config's mixed_precision."""
    def set_precision(value: str | None):
        if value is None:
            monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
        else:
            monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", value)
    return set_precision


@pytest.mark.parametrize(
    "extra, bf16, fp16",
    [
        (["--bf16"], True, False),  # bf16 is `bool | None` in TRL: a bare switch used to be "expected one argument"
        (["--bf16", "--max-steps", "2"], True, False),
        (["--bf16", "true"], True, False),
        (["--bf16", "false"], False, False),
        (["--bf16=false"], False, False),
        (["--fp16"], False, True),
        (["--fp16", "false"], False, False),
    ],
)
def test_precision_flags_are_switches_and_take_values(tmp_path, launched, extra, bf16, fp16):
    launched(None)
    settings = resolved(tmp_path, extra)
    assert (settings.args.bf16, settings.args.fp16) == (bf16, fp16)
    assert settings.provenance["trl"]["bf16" if "--bf16" in extra[0] else "fp16"] == "flag"


def test_the_launchers_mixed_precision_is_the_trainers(tmp_path, launched):
    launched(None)  # no launcher: wemask's CPU default, no bf16
    alone = resolved(tmp_path, [])
    assert alone.args.bf16 is False and alone.args.mixed_precision == "no"
    launched("bf16")
    settings = resolved(tmp_path, [])
    assert settings.args.bf16 is True and settings.args.fp16 is False and settings.args.mixed_precision == "bf16"
    assert settings.provenance["trl"]["bf16"] == LAUNCHED_BF16
    agreeing = resolved(tmp_path, ["--bf16"])
    assert agreeing.args.bf16 is True and agreeing.provenance["trl"]["bf16"] == "flag"
    launched("fp16")
    half = resolved(tmp_path, [])
    assert (half.args.bf16, half.args.fp16) == (False, True) and half.args.mixed_precision == "fp16"
    launched("no")  # accelerate's default when its config sets nothing: the flags decide
    assert resolved(tmp_path, ["--bf16"]).args.bf16 is True


@pytest.mark.parametrize(
    "launcher, extra, recipe, named",
    [
        ("bf16", ["--bf16", "false"], None, "--bf16 false"),
        ("bf16", ["--fp16"], None, "--fp16 true"),
        ("fp16", ["--bf16"], None, "--bf16 true"),
        ("bf16", [], "bf16: false\n", "bf16: false in the recipe"),
    ],
)
def test_a_conflict_names_both_settings(tmp_path, launched, launcher, extra, recipe, named):
    launched(launcher)
    with pytest.raises(WeMaskError) as info:
        resolved(tmp_path, extra, recipe)
    message = str(info.value)
    assert f"mixed_precision: {launcher}" in message and named in message and "\n" not in message


def test_a_conflict_is_one_line_before_any_model_loads(monkeypatch, capsys, tmp_path, launched, weightless_model_dir):
    launched("bf16")
    missing_model = weightless_model_dir  # its weights are never read: the conflict is found first
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", missing_model, "--dataset", DATA, "-o", str(tmp_path / "o"), "--bf16", "false")
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("wemask: error")]
    assert lines == [lines[0]] and "precision conflict" in lines[0] and "--bf16 false" in lines[0] and "mixed_precision: bf16" in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, precision", [([], {"value": "no", "source": "default"}), (["--bf16"], {"value": "bf16", "source": "flag"})])
def test_one_process_records_what_ran(tmp_path, launched, tiny_model_dir, extra, precision):
    launched(None)
    options = TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "o"), dataset=DATA, mask_rate="0.3", me_layer="1")
    result = run(SFTStage(), options, ["--max-steps", "1", "--max-length", "32", "--save-strategy", "no", "--report-to", "none", *extra])
    facts = json.loads((tmp_path / "o" / "wemask_run.json").read_text())["distributed"]
    assert facts == {
        "launcher": "single process",
        "type": {"value": "NO", "source": "single process"},
        "world_size": {"value": 1, "source": "single process"},
        "sharding": {"value": "none", "source": "single process"},
        "precision": precision,
    }
    assert result.trainer.accelerator.mixed_precision == precision["value"]
    compute = "bfloat16" if extra else "float32"  # --bf16 on one process: autocast over float32 weights, as DDP
    assert json.loads((tmp_path / "o" / "wemask_run.json").read_text())["dtypes"] == {
        "weights": ["float32"], "master": ["float32"], "activations": [compute], "saved": ["float32"]}


def test_a_gathered_state_dict_saves_tied_weights_once(tmp_path):
    """What ZeRO-2 and FSDP2 give save_pretrained: a copy of every tensor, so the tied lm_head.weight was saved as a
    second copy of the embeddings."""
    import torch
    from conftest import make_tiny_model
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from wemask_cli.train.tied import save_tied_once

    model = make_tiny_model("llama", tie_word_embeddings=True)
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path, state_dict={key: value.clone() for key, value in model.state_dict().items()})
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        assert "lm_head.weight" in weights.keys()  # transformers kept the copy
    assert save_tied_once(tmp_path, model) == ["lm_head.weight"]
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        assert "lm_head.weight" not in weights.keys() and weights.metadata() == {"format": "pt"}
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert torch.equal(reloaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert save_tied_once(tmp_path, model) == []
