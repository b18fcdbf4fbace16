"""What wemask loads is checked once, at load: a NaN or infinity in intervention weights, a LoRA adapter or a full
model is one line naming the file and the tensor, before any output; infer's --input rows are checked when the file
is read; remedy ranks are bounded by the model's hidden size; a resume after a kill in the final save stops at
--max-steps."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import make_tiny_model, run_main
from safetensors.torch import load_file, save_file

from wemask_cli.eval.stats import mean_se, summarize
from wemask_cli.interventions import WEIGHTS_FILE, load_saved
from wemask_cli.models.loading import load_model
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.checkpoints import resume_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL = ["--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "64", "--learning-rate", "1e-2",
       "--seed", "0", "--report-to", "none", "--save-steps", "1"]  # fmt: skip
RUN_FLAGS = ["--use-peft", "--lora-r", "4", "--gated-norm", "both", "--pre-affine", "both", "--gated-attention",
             "--mask-rate", "0.3"]  # fmt: skip


def train(monkeypatch, capsys, out, model, *extra):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", model, "--dataset", DATA, "-o", str(out), *TRL, *extra)
    assert code == 0, err
    return out


@pytest.fixture
def tiny_run(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """RUN on the tiny model: LoRA, GatedNorm + PreAffine on both norms, gated attention, WeMask r=0.3."""
    return train(monkeypatch, capsys, tmp_path / "run", tiny_model_dir, *RUN_FLAGS, "--me-layer", "1", "--max-steps", "1")


def poison(path: Path, match: str, value: float = math.nan) -> str:
    """Set every tensor of the safetensors file whose name contains `match` to `value`; returns one name."""
    tensors = load_file(str(path))
    names = sorted(name for name in tensors if match in name)
    assert names, (match, sorted(tensors))
    for name in names:
        tensors[name] = torch.full_like(tensors[name], value)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return names[0]


def assert_one_line(code: int, out: str, err: str, *parts: str) -> None:
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and all(part in lines[0] for part in parts), (lines, parts)


def test_non_finite_intervention_weights_are_refused_by_infer_and_eval(monkeypatch, capsys, tmp_path, tiny_run):
    weights = tiny_run / WEIGHTS_FILE
    name = poison(weights, ".up")
    assert name.startswith(("gated_norm.", "gated_attention."))
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(tiny_run), "--prompt", "hi", "--max-new-tokens", "2")
    assert_one_line(code, out, err, str(weights), name, "NaN or infinity")
    for task in ("choice", "perplexity"):
        code, out, err = run_main(monkeypatch, capsys, "eval", "--model", str(tiny_run), "--task", task, "--limit", "4",
                                  "--output", str(tmp_path / f"eval-{task}"))  # fmt: skip
        assert_one_line(code, out, err, str(weights), name)
    with pytest.raises(WeMaskError, match="holds NaN or infinity"):
        load_saved(tiny_run)


def test_one_infinite_pre_affine_tensor_is_refused(tiny_run):
    name = poison(tiny_run / WEIGHTS_FILE, "pre_affine.", math.inf)
    with pytest.raises(WeMaskError, match=f"tensor {name} holds NaN or infinity"):
        load_model(str(tiny_run))


def test_a_non_finite_lora_adapter_is_refused_and_not_resumed_from(monkeypatch, capsys, tiny_run):
    adapter = tiny_run / "adapter_model.safetensors"
    name = poison(adapter, "lora_B")
    with pytest.raises(WeMaskError, match=f"{adapter}: tensor {name} holds NaN"):
        load_model(str(tiny_run))
    checkpoint = tiny_run / "checkpoint-1"
    poison(checkpoint / "adapter_model.safetensors", "lora_A")
    (tiny_run / "metrics.json").unlink()
    with pytest.raises(WeMaskError, match=r"checkpoint-1: adapter_model.safetensors: tensor .*lora_A.* holds NaN"):
        resume_checkpoint(tiny_run)


def test_a_non_finite_full_model_is_refused_naming_its_file(tmp_path, tiny_tokenizer):
    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[3, 5] = math.inf
    model.save_pretrained(tmp_path / "m")
    tiny_tokenizer.save_pretrained(tmp_path / "m")
    with pytest.raises(WeMaskError, match=r"m/model.safetensors: tensor model.layers.1.mlp.down_proj.weight holds NaN"):
        load_model(str(tmp_path / "m"))


def test_a_non_finite_pytorch_bin_model_is_refused_by_both_engines_checks(tmp_path, tiny_tokenizer):
    """pytorch_model.bin: the transformers engine's refusal names the file, and the file check vLLM runs before it
    serves a folder reads it too (a damaged one is one line)."""
    from wemask_cli.models.weights import require_finite_folder

    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[3, 5] = math.nan
    folder = tmp_path / "m"
    model.config.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    refusal = r"m/pytorch_model.bin: tensor model.layers.1.mlp.down_proj.weight holds NaN"
    with pytest.raises(WeMaskError, match=refusal):
        load_model(str(folder))
    with pytest.raises(WeMaskError, match=refusal):
        require_finite_folder(folder)
    (folder / "pytorch_model.bin").write_bytes((folder / "pytorch_model.bin").read_bytes()[:1000])
    with pytest.raises(WeMaskError, match=r"pytorch_model.bin cannot be read .*: it is truncated or damaged"):
        require_finite_folder(folder)
    torch.save({"weights": model.state_dict(), "args": SimpleNamespace(lr=1.0)}, folder / "pytorch_model.bin")
    with pytest.raises(WeMaskError, match=r"pytorch_model.bin holds Python objects besides tensors, .*: save the model again"):
        require_finite_folder(folder)


def test_mean_se_and_summaries_survive_one_value_and_non_finite_values():
    assert mean_se([1.0]) is None and mean_se([]) is None
    assert mean_se([math.nan, 1.0]) is None and mean_se([math.inf, math.nan, 2.0]) is None
    assert mean_se([1.0, 3.0]) == pytest.approx(1.0)
    rows = [{"metric": "ppl", "value": v, "se": None, "n": 1} for v in (math.nan, math.inf)]
    assert summarize(rows, [])[0]["std"] is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": 5}, "line 2: 'prompt' must be a string or a non-empty list of {'role': ..., 'content': ...} objects with text values, not 5"),
        ({"prompt": None}, "line 2: 'prompt' must be a string or a non-empty list of {'role': ..., 'content': ...} objects with text values, not null"),
        ({"messages": []}, "line 2: 'messages' must be a string or a non-empty list"),
        ({"messages": [{"role": "user", "content": 3}]}, "line 2: 'messages' must be a string or a non-empty list"),
    ],
)
def test_bad_infer_input_rows_are_refused_before_the_model_loads(monkeypatch, capsys, tmp_path, row, message):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"prompt": "fine"}) + "\n" + json.dumps(row) + "\n")
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(tmp_path / "no-such-model"), "--input", str(path))
    assert_one_line(code, out, err, message)  # the model (which does not exist) was never looked at


def test_jsonl_strings_may_hold_line_separators(monkeypatch, capsys, tmp_path, tiny_model_dir):
    from wemask_cli.commands.infer import read_prompts
    from wemask_cli.data import read_json_rows

    text = "a\u2028b\u0085c\u2029d\x0ce"
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"prompt": text, "text": text}, ensure_ascii=False) + "\r\n" + json.dumps({"prompt": "x"}) + "\n", encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert read_prompts(None, path) == [text, "x"]
    assert read_json_rows(path, "--dataset") == ("line", [(1, {"prompt": text, "text": text}), (2, {"prompt": "x"})])
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "--input", str(path), "--max-new-tokens", "1")
    assert code == 0, err


def test_remedy_ranks_above_the_hidden_size_are_refused_before_the_folder(monkeypatch, capsys, tmp_path, tiny_model_dir):
    for flags in (["--gated-norm", "both", "--gated-norm-rank", "100000"], ["--gated-attention", "--gated-attention-rank", "65"]):
        code, out, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA,
                                  "-o", str(tmp_path / "o"), *TRL, "--max-steps", "1", *flags)  # fmt: skip
        assert_one_line(code, out, err, flags[-2], "larger than the model's hidden size 64: use at most 64")
        assert not (tmp_path / "o").exists()
    from wemask_cli.interventions.gated_norm import GatedNorm

    with pytest.raises(WeMaskError, match="hidden size 64"):  # installing directly (the API) refuses too
        GatedNorm(norms="attn", rank=65).install(make_tiny_model("llama"))


def test_resume_after_a_kill_in_the_final_save_stops_at_max_steps(monkeypatch, capsys, tmp_path, tiny_model_dir):
    straight = train(monkeypatch, capsys, tmp_path / "straight", tiny_model_dir, "--use-peft", "--lora-r", "4", "--max-steps", "2")
    out = train(monkeypatch, capsys, tmp_path / "killed", tiny_model_dir, "--use-peft", "--lora-r", "4", "--max-steps", "2")
    # killed while the final save wrote the output: checkpoint-2 is complete, the output's files are torn, no metrics
    (out / "metrics.json").unlink()
    (out / "adapter_model.safetensors").write_bytes(b"torn")
    (out / "wemask_run.json").write_text("{")
    train(monkeypatch, capsys, out, tiny_model_dir, "--use-peft", "--lora-r", "4", "--max-steps", "2", "--resume")
    expected, got = (json.loads((folder / "metrics.json").read_text()) for folder in (straight, out))
    assert got["global_step"] == expected["global_step"] == 2
    assert got["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-9)
    assert got["loss_history"] == expected["loss_history"]
    saved, resumed = (load_file(str(folder / "adapter_model.safetensors")) for folder in (straight, out))
    assert saved.keys() == resumed.keys() and all(torch.equal(saved[k], resumed[k]) for k in saved)


@pytest.mark.embedded
def test_the_embedded_run_with_nan_gates_is_refused(monkeypatch, capsys, tmp_path, embedded_dir):
    run = train(monkeypatch, capsys, tmp_path / "run", embedded_dir, *RUN_FLAGS, "--me-layer", "11", "--max-steps", "1",
                "--per-device-train-batch-size", "1", "--max-length", "32", "--train-on-prompt")  # fmt: skip
    name = poison(run / WEIGHTS_FILE, "gated_norm.")
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(run), "--prompt", "hi")
    assert_one_line(code, out, err, str(run / WEIGHTS_FILE), name)
    from wemask_cli.runtime.finite import first_non_finite

    model = load_model(embedded_dir).model
    start = time.perf_counter()
    assert first_non_finite(model.named_parameters()) is None
    seconds = time.perf_counter() - start
    print(f"finite check of the embedded model's {sum(p.numel() for p in model.parameters()):,} parameters: {seconds:.3f} s")
