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


def test_report_setting_names_stay_whole_at_80_columns(monkeypatch, capsys, tmp_path, eighty_columns):
    """Setting names that do not fit the table are keyed (#1) and named whole below it, not folded over 7 lines."""
    from test_report import write_training_run

    from wemask_cli.commands.report import gather

    runs = tmp_path / "runs"
    write_training_run(runs / "full-same", stage="dpo", ref_mask="same", loss=0.612345)
    write_training_run(runs / "lora-none-hh", stage="dpo", ref_mask="none", peft=True, dataset="data/hh-rlhf-helpful-base.jsonl", loss=0.4)
    code, out, err = run_main(monkeypatch, capsys, "report", *sorted(str(p) for p in runs.iterdir()), "--no-plot")
    assert code == 0, err
    assert widest(out) <= 80
    names = sorted({row["line"] for row in gather(sorted(runs.iterdir()))})
    assert names == ["aware r=0.3, LoRA r=16, ref-mask none, data hh-rlhf-helpful-base.jsonl",
                     "aware r=0.3, full, ref-mask same, data sft_chat.jsonl"]  # fmt: skip
    keyed = [line.split("  ", 1) for line in out.splitlines() if line.startswith("#")]
    assert sorted(name for _, name in keyed) == names
    cells = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert {cell for cell in cells if cell} == {key for key, _ in keyed}  # each row names its setting by key, on one line
