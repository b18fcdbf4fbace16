"""`wemask sft --overwrite` keeps an eval/ folder inside the run (another command's output); `wemask report` then
leaves that eval out with one line, never beside the new run it did not measure."""

from __future__ import annotations

from pathlib import Path

from conftest import run_main

SFT_DATA = Path(__file__).resolve().parent.parent / "data" / "sft_chat.jsonl"
PPL_TEXT = Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "eval" / "perplexity.txt"


def test_an_eval_of_a_replaced_run_is_left_out_with_a_line(monkeypatch, capsys, tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    sft = ["sft", "--model", tiny_model_dir, "--dataset", str(SFT_DATA), "-o", str(run), "--max-steps", "1",
           "--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none"]  # fmt: skip
    code, _, err = run_main(monkeypatch, capsys, *sft)
    assert code == 0, err
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", str(run), "--task", "perplexity", "--data", str(PPL_TEXT),
                            "--window", "16", "--limit", "2", "--output", str(run / "eval"))  # fmt: skip
    assert code == 0, err
    code, out, err = run_main(monkeypatch, capsys, "report", str(run), "--no-plot")
    assert code == 0 and "perplexity" in out and "leaving out" not in err, err

    code, _, err = run_main(monkeypatch, capsys, *sft, "--overwrite")  # starts seconds after the eval did
    assert code == 0 and (run / "eval" / "metrics.json").is_file(), err
    code, out, err = run_main(monkeypatch, capsys, "report", str(run), "--no-plot")
    assert code == 0 and "perplexity" not in out and "train_loss" in out, out
    assert f"leaving out {run / 'eval' / 'metrics.json'}: it evaluated an earlier run in {run}" in err, err
