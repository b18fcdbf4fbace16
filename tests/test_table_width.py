"""Every table of report, locate and infer fits 80 columns (COLUMNS=80) with no number or header cut: columns are
folded at word boundaries or split over a second table instead."""

from __future__ import annotations

import re

import pytest
from conftest import run_main
from rich.cells import cell_len


@pytest.fixture
def eighty_columns(monkeypatch):
    from wemask_cli.render.common import console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(console, "_width", 80)  # the console read COLUMNS when it was made


def widest(text: str) -> int:
    return max(cell_len(line) for line in text.splitlines())


def test_locate_tables_fit_80_columns(monkeypatch, capsys, tiny_model_dir, eighty_columns):
    code, out, err = run_main(monkeypatch, capsys, "locate", "--model", tiny_model_dir, "--max-length", "16", "--num-prompts", "4")
    assert code == 0, err
    assert widest(out) <= 80
    for header in ("ΔKL", "sink", "ΔFrac", "ΔC↓", "max|h|"):  # the narrow columns go to a second table, not away
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", out, re.M), header
    assert "per-layer statistics, continued" in out


def test_infer_tables_fit_80_columns(monkeypatch, capsys, tiny_model_dir, eighty_columns):
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "-p", "Count: 1 2 3 4 5 6 7 8 9",
                              "--mask-rate", "0,0.3,0.7,1.0", "--me-layer", "1", "--max-new-tokens", "12")  # fmt: skip
    assert code == 0, err
    assert widest(out) <= 80
    headers = re.findall(r"┃ (no mask|r=[0-9.]+)\s", out)
    assert sorted(headers) == ["r=0", "r=0.3", "r=0.7", "r=1"]  # whole, each once
    assert "(1 of " in out  # split over tables rather than folded to a few letters per column
