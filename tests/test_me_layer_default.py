"""`--mask-rate R` alone: --me-layer defaults to auto (located once per model, cached), with one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl"


def test_training_on_a_model_without_massive_activation_says_so(monkeypatch, capsys, tmp_path, tiny_model_dir):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "-o", str(tmp_path / "o"),
                            "--mask-rate", "0.3", "--max-steps", "1", "--dataset", str(DATA))
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("wemask: error: --me-layer auto: no ME layer found")


@pytest.mark.embedded
def test_mask_rate_alone_locates_the_me_layer_of_the_embedded_model(monkeypatch, capsys, embedded_dir):
    args = ("infer", "--model", embedded_dir, "-p", "The capital of France is", "--max-new-tokens", "4")
    code, alone, err = run_main(monkeypatch, capsys, *args, "--mask-rate", "1.0")
    assert code == 0, err
    assert "ME layer (auto): 11 (0-based)" in err
    code, explicit, err = run_main(monkeypatch, capsys, *args, "--mask-rate", "1.0", "--me-layer", "11")
    assert code == 0, err
    code, plain, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    assert alone == explicit != plain
