"""`wemask infer` and the CLI error contract: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli import WeMaskConfig
from wemask_cli.models import loading as models_module


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mask-rate", "1.5", "--me-layer", "1"], "--mask-rate 1.5 is out of range: use a number in [0, 1]"),
        (["--mask-rate", "abc", "--me-layer", "1"], "'abc' is not a number"),
        (["--mask-rate", "0.3", "--me-layer", "x"], "--me-layer 'x' is not valid"),
        (["--mask-rate", "0.3", "--me-layer", "99"], "--me-layer 99 is outside MODEL: it has 4 layers, use 0..3"),
        (["--mask-rate", "0.3"], "--me-layer auto: no ME layer found"),  # --me-layer defaults to auto; a random model has none
        (["--mask-rate", "0.3", "--me-layer", "1", "--strength", "3"], "strength=3.0 is out of range"),
    ],
)
def test_bad_wemask_flags_exit_2_with_one_line(monkeypatch, capsys, tiny_model_dir, args, message):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "hi", *args)
    assert code == 2
    assert err.strip().count("\n") == 0 and message.replace("MODEL", tiny_model_dir) in err and "Traceback" not in err


def test_missing_model_exits_2_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "wemask_cli", "infer", "--model", str(tmp_path / "missing"), "-p", "hi"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"wemask: error: --model {tmp_path / 'missing'}: no such directory; give an existing model directory, a .gguf file or a hub id"
    )
    offline = subprocess.run(
        [sys.executable, "-m", "wemask_cli", "infer", "--model", "nobody/no-such-model", "-p", "hi"],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert offline.returncode == 2 and "Traceback" not in offline.stderr
    assert "could not load model 'nobody/no-such-model'" in offline.stderr and offline.stderr.count("\n") == 1


def test_sweep_loads_once_and_writes_jsonl(monkeypatch, capsys, tiny_model_dir, tmp_path):
    loads = []
    real_load = models_module.load_model
    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    out = tmp_path / "out.jsonl"
    code, stdout, _ = run_main(
        monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "What is 12 plus 30?", "-p", "hello there",
        "--mask-rate", "0,1.0", "--me-layer", "0", "--max-new-tokens", "6", "--output", str(out),
    )
    assert code in (0, None) and len(loads) == 1
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["mask_rate"] for r in records] == [0.0, 0.0, 1.0, 1.0]
    assert records[0]["wemask"]["mask_rate"] == 0.0 and records[2]["wemask"]["dims"]["3"]
    assert records[0]["completion"] != records[2]["completion"] or records[1]["completion"] != records[3]["completion"]
    assert "r=0" in stdout and "r=1" in stdout


def test_saved_config_is_reapplied_and_announced(monkeypatch, capsys, tiny_model_dir, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for item in __import__("pathlib").Path(tiny_model_dir).iterdir():
        (model_dir / item.name).symlink_to(item)
    WeMaskConfig(mask_rate=1.0, me_layer=0, mode="free").save(model_dir)
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}]}) + "\n")
    out = tmp_path / "out.jsonl"
    code, _, err = run_main(
        monkeypatch, capsys, "infer", "--model", str(model_dir), "--input", str(inputs), "--max-new-tokens", "4",
        "--output", str(out),
    )
    assert code in (0, None)
    assert "Applying the WeMask config saved with" in err
    record = json.loads(out.read_text())
    assert record["wemask"]["mask_rate"] == 1.0 and record["wemask"]["mode"] == "free"


def test_bad_input_file_reports_line_number(monkeypatch, capsys, tiny_model_dir, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json}\n')
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "--input", str(bad))
    assert code == 2 and "line 2 is not valid JSON" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["infer", "--bogus"], "No such option: --bogus (see 'wemask infer --help')"),
        (["infer", "--batch-size", "x"], "Invalid value for '--batch-size'"),
        (["infer", "--max-new-tokens"], "Option '--max-new-tokens' requires an argument. (see 'wemask infer --help')"),
        (["locate", "--bogus"], "(see 'wemask locate --help')"),
        (["eval", "--limit", "many"], "(see 'wemask eval --help')"),
        (["report"], "Missing argument"),
        (["nosuch"], "No such command 'nosuch'. (see 'wemask --help')"),
    ],
)
def test_usage_errors_are_one_line_exit_2(monkeypatch, capsys, args, message):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("wemask: error: ") and err.count("\n") == 1 and message in err, err


def test_help_still_works(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "infer", "--help")
    assert code == 0 and "Usage: wemask infer" in " ".join(out.split()) and "--overwrite" in out


@pytest.fixture
def no_load(monkeypatch):
    """Fails the test if a model is loaded: these checks come first."""
    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--temperature", "-0.5"], "--temperature -0.5 is not valid"),
        (["--top-p", "0"], "--top-p 0 is out of range: use a number in (0, 1]"),
        (["--top-p", "1.5"], "--top-p 1.5 is out of range"),
        (["--batch-size", "0"], "--batch-size 0 is not valid: use 1 or more"),
        (["--max-new-tokens", "0"], "--max-new-tokens 0 is not valid: use 1 or more"),
    ],
)
def test_bad_generation_flags_are_refused_before_loading(monkeypatch, capsys, no_load, args, message):
    code, _, err = run_main(monkeypatch, capsys, "infer", "-p", "hi", *args)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_existing_output_needs_overwrite(monkeypatch, capsys, tiny_model_dir, tmp_path):
    out = tmp_path / "done.jsonl"
    out.write_text("a finished run\n")
    with monkeypatch.context() as patch:
        patch.setattr(models_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
        code, _, err = run_main(monkeypatch, capsys, "infer", "-p", "hi", "--output", str(out))
        assert code == 2 and err == f"wemask: error: --output {out} exists: pass --overwrite to replace it, or choose another name\n"
        code, _, err = run_main(monkeypatch, capsys, "infer", "-p", "hi", "--output", str(tmp_path))
        assert code == 2 and "is a folder" in err
    assert out.read_text() == "a finished run\n"
    code, _, err = run_main(
        monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "hi", "--max-new-tokens", "2", "--output", str(out), "--overwrite"
    )
    assert code == 0, err
    assert json.loads(out.read_text())["input"] == "hi"


def test_non_utf8_input_is_one_line(monkeypatch, capsys, no_load, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    code, _, err = run_main(monkeypatch, capsys, "infer", "--input", str(prompts))
    assert code == 2 and err.count("\n") == 1 and f"--input {prompts} is not UTF-8 text" in err, err


def test_me_layer_auto_shows_a_status_while_locating(monkeypatch, capsys, tiny_model_dir):
    import contextlib

    from wemask_cli.mask_request import me_layer_cache as locate_cache
    from wemask_cli.render.common import err_console

    shown = []
    monkeypatch.setattr(err_console, "status", lambda text, **k: shown.append(text) or contextlib.nullcontext())
    monkeypatch.setattr(locate_cache, "cached_me_layer", lambda loaded: shown.append("located") or 1)
    code, _, err = run_main(
        monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "hi", "--mask-rate", "0.3", "--me-layer", "auto",
        "--max-new-tokens", "2",
    )  # fmt: skip
    assert code == 0, err
    assert "ME layer (auto): 1 (0-based)" in err
    assert shown.index("Locating the ME layer (once per model, cached)...") == shown.index("located") - 1


def test_a_runs_recorded_dims_are_reused_at_its_own_rate():
    from wemask_cli.interventions.saved import SavedRun
    from wemask_cli.interventions.wemask import WeMask
    from wemask_cli.mask_request.flags import MaskRequest, parse_mask_rates
    from wemask_cli.models.loading import LoadedModel

    saved = WeMaskConfig(mask_rate=0.3, me_layer=1, mode="aware", dims={1: [5, 9], 2: [0, 7], 3: [1, 2]})
    loaded = LoadedModel(model=None, tokenizer=None, source="run", saved=SavedRun([WeMask(saved)]))
    same, other = MaskRequest.parse(mask_rate="0.3,0.5").configs(loaded)
    assert same.dims == saved.dims and other.dims is None and other.mask_rate == 0.5
    assert parse_mask_rates("0.3,0,0.3") == [0.3, 0.0]


# --- issue 10: nothing silent, no traceback ------------------------------------------------------------------


def test_an_empty_prompt_without_chat_template_is_one_line(monkeypatch, capsys, tiny_model_dir):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "--prompt", "", "--no-chat-template")
    assert code == 2 and err == "wemask: error: prompt 1 is empty: nothing to generate from (give some text, or keep the chat template on)\n"


@pytest.mark.parametrize("command", [["infer", "-p", "hi", "--output"], ["locate", "--json"], ["locate", "--plot"], ["report", "RUN", "--json"]])
def test_unwritable_outputs_are_refused_before_the_model_loads(monkeypatch, capsys, no_load, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"stage": "sft", "mode": "aware", "mask_rate": 0.3, "train_loss": 2.5}))
    target = str(blocker / ("out.png" if command[-1] == "--plot" else "out.json"))
    args = [str(run) if a == "RUN" else a for a in command]
    code, _, err = run_main(monkeypatch, capsys, *args, target)
    assert code == 2 and err.count("\n") == 1 and f"{command[-1]} {target}: {blocker} is a file" in err, err


def test_long_prompts_are_cut_from_the_left_with_one_warning(monkeypatch, capsys, tiny_model_dir, tmp_path):
    lines = [f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(60)]  # far over 256 positions
    out = tmp_path / "out.jsonl"
    code, stdout, err = run_main(
        monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "\n".join(lines), "-p", "short one",
        "--max-new-tokens", "3", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "1 of 2 prompt(s) were longer than 253 tokens" in warnings[0] and "cut from the left" in warnings[0]
    assert [json.loads(line)["truncated"] for line in out.read_text().splitlines()] == [True, False]
    assert "line 0:" in stdout and "line 3:" not in stdout  # the table shows the first lines only
    assert "--output FILE keeps them whole" in " ".join(stdout.split())


def test_ctrl_c_while_starting_is_one_line_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(models_module, "load_model", interrupted)
    code, _, err = run_main(monkeypatch, capsys, "infer", "-p", "hi")
    assert code == 130 and err == "wemask: interrupted\n"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory, tiny_tokenizer) -> str:
    import transformers

    path = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64)  # fmt: skip
    transformers.BertForMaskedLM(config).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return str(path)


def test_an_encoder_model_is_refused_by_infer_and_sft(monkeypatch, capsys, bert_dir, tmp_path):
    expected = f"wemask: error: --model {bert_dir} is not a causal (decoder-only) language model (bert)"
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", bert_dir, "-p", "hi")
    assert code == 2 and err.startswith(expected) and err.count("\n") == 1, err
    sft_data = str(Path(__file__).resolve().parent.parent / "data" / "sft_chat.jsonl")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", bert_dir, "--dataset", sft_data, "-o", str(tmp_path / "out"))
    assert code == 2 and err.splitlines()[-1].startswith(expected) and "Traceback" not in err, err


def test_saved_interventions_are_reinstalled_by_load_model(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import torch

    from wemask_cli.interventions import install_all, save_interventions
    from wemask_cli.interventions.gated_norm import GatedNorm
    from wemask_cli.models.loading import load_model

    plain = load_model(tiny_model_dir, dtype="float32")
    run_dir = tmp_path / "run"
    plain.model.save_pretrained(run_dir)  # the base weights
    plain.tokenizer.save_pretrained(run_dir)
    installation = install_all(plain.model, [GatedNorm(norms="attn", rank=2, layers="1:3")])
    with torch.no_grad():
        for parameter in installation.parameters():
            parameter.add_(0.5)  # away from the identity, so re-applying it changes the logits
    save_interventions(run_dir, installation)
    ids = torch.tensor([[5, 6, 7, 8]])
    expected = plain.model(ids).logits

    loaded = load_model(str(run_dir), dtype="float32")
    assert loaded.installed is not None and [c.kind for c in loaded.installed.configs] == ["gated_norm"]
    assert torch.equal(loaded.model(ids).logits, expected)
    bare = load_model(str(run_dir), dtype="float32", interventions=False)
    assert bare.installed is None and not torch.equal(bare.model(ids).logits, expected)
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(run_dir), "-p", "hi", "--max-new-tokens", "2")
    assert code == 0 and "Applying the interventions saved with" in err and "GatedNorm" in err, err
