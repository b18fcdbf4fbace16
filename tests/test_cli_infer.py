"""`wemask infer` and the CLI error contract: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_main

from wemask_cli import WeMaskConfig
from wemask_cli import models as models_module


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mask-rate", "1.5", "--me-layer", "1"], "--mask-rate 1.5 is out of range: use a number in [0, 1]"),
        (["--mask-rate", "abc", "--me-layer", "1"], "'abc' is not a number"),
        (["--mask-rate", "0.3", "--me-layer", "x"], "--me-layer 'x' is not valid"),
        (["--mask-rate", "0.3", "--me-layer", "99"], "me_layer=99 is outside the model: it has 4 layers, use 0..3"),
        (["--mask-rate", "0.3"], "--mask-rate needs --me-layer"),
        (["--mask-rate", "0.3", "--me-layer", "1", "--strength", "3"], "strength=3.0 is out of range"),
    ],
)
def test_bad_wemask_flags_exit_2_with_one_line(monkeypatch, capsys, tiny_model_dir, args, message):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "hi", *args)
    assert code == 2
    assert err.strip().count("\n") == 0 and message in err and "Traceback" not in err


def test_missing_model_exits_2_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "wemask_cli", "infer", "--model", str(tmp_path / "missing"), "-p", "hi"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"wemask: error: --model {tmp_path / 'missing'}: no such directory; give an existing model directory, a .gguf file or a hub id"
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
