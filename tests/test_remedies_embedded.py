"""Step-0 identity end to end: a LoRA run with every remedy at learning rate 0 evaluates exactly like its base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.interventions import load_saved

pytestmark = pytest.mark.embedded
DATA = Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl"


def perplexity(monkeypatch, capsys, model: str, out: Path) -> tuple[float, str]:
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", model, "--task", "perplexity", "--limit", "2", "-o", str(out))
    assert code == 0, err
    results = json.loads((out / "metrics.json").read_text())["results"]
    return next(r["value"] for r in results if r["metric"] == "perplexity"), err


def test_a_learning_rate_0_run_with_every_remedy_has_the_base_models_perplexity(monkeypatch, capsys, tmp_path, embedded_dir):
    """Exact, not approximate: LoRA's B and the gates' W_up start at 0 and lambda_1 at 1, AdamW at lr 0 (decay
    factor 1 - 0 * wd = 1) changes nothing, so every added term is an exact +0 or *1 in float32."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(DATA.read_text().splitlines(keepends=True)[:4]))
    run = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch, capsys, "sft", "--model", embedded_dir, "--dataset", str(rows), "-o", str(run), "--use-peft",
        "--gated-norm", "both", "--pre-affine", "both", "--gated-attention", "--max-steps", "1", "--learning-rate", "0",
        "--per-device-train-batch-size", "2", "--max-length", "64", "--seed", "0", "--report-to", "none", "--save-strategy", "no",
    )  # fmt: skip
    assert code == 0, err
    assert [c.kind for c in load_saved(run).remedies] == ["gated_norm", "pre_affine", "gated_attention"]
    assert (run / "adapter_model.safetensors").is_file()
    ran, said = perplexity(monkeypatch, capsys, str(run), tmp_path / "ran")
    assert "Applying the interventions saved with" in said and "GatedNorm" in said  # eval re-applied the remedies
    recorded = json.loads((tmp_path / "ran" / "metrics.json").read_text())["provenance"]["model"]["interventions"]
    assert [c["kind"] for c in recorded] == ["gated_norm", "pre_affine", "gated_attention"]  # and says so in metrics.json
    assert ran == perplexity(monkeypatch, capsys, embedded_dir, tmp_path / "base")[0]
