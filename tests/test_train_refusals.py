"""Training settings that cannot work are one line and exit 2 before anything loads: --deepspeed without a launcher
or with an accelerate YAML."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import run_main

DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")


def sft(monkeypatch, capsys, tmp_path, *extra) -> tuple[int, str]:
    code, _, err = run_main(monkeypatch, capsys, "sft", "--dataset", DATA, "-o", str(tmp_path / "out"), "--max-steps", "1", *extra)
    assert "Traceback" not in err, err
    return code, err.strip().splitlines()[-1]


def test_deepspeed_in_one_process_is_one_line(tmp_path, monkeypatch, capsys):
    assert "LOCAL_RANK" not in os.environ  # as a user runs `wemask sft` in a shell
    ds3 = tmp_path / "ds3.json"
    ds3.write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}))
    code, line = sft(monkeypatch, capsys, tmp_path, "--deepspeed", str(ds3))
    assert code == 2 and line.startswith(f"wemask: error: --deepspeed {ds3} needs processes started by a launcher"), line
    assert "torchrun --nproc_per_node N -m wemask_cli" in line
    yaml = tmp_path / "zero3.yaml"
    yaml.write_text("distributed_type: DEEPSPEED\n")
    code, line = sft(monkeypatch, capsys, tmp_path, "--deepspeed", str(yaml))
    assert code == 2 and "DeepSpeed reads a JSON config" in line and "accelerate launch --config_file" in line, line
    assert not (tmp_path / "out").exists()


def test_dpo_pairs_that_continue_different_conversations_are_refused(tmp_path, monkeypatch, capsys, tiny_model_dir):
    def turn(role, text):
        return {"role": role, "content": text}

    same = [turn("user", "Hi"), turn("assistant", "Hello! How can I help?")]
    rows = [{"chosen": [*same, turn("user", "Add 2 and 2"), turn("assistant", "4")],
             "rejected": [*same, turn("user", "Add 2 and 2"), turn("assistant", "5")]},
            {"chosen": [*same, turn("user", "Add 2 and 2"), turn("assistant", "4")],
             "rejected": [*same, turn("user", "Insult me"), turn("assistant", "No.")]}]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, _, err = run_main(monkeypatch, capsys, "dpo", "--model", tiny_model_dir, "--dataset", str(data), "-o", str(tmp_path / "out"),
                            "--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64", "--report-to", "none")
    line = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err, err
    assert line.startswith("wemask: error: row 2: chosen and rejected continue the conversation differently after message 2"), line


def test_a_trl_field_given_twice_is_refused(tmp_path, monkeypatch, capsys):
    code, line = sft(monkeypatch, capsys, tmp_path, "--max_steps", "1", "--max-steps", "2")  # sft() adds --max-steps 1 first
    assert code == 2 and line == "wemask: error: wemask sft: --max-steps and --max_steps both set max_steps: give it once", line


def test_an_integer_written_with_an_exponent_in_a_recipe_says_how_to_write_it(tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_steps: 1e1\n")
    code, line = sft(monkeypatch, capsys, tmp_path, "--config", str(recipe))
    assert code == 2 and line.endswith("max_steps: '1e1' is not a valid value (an integer field: write 10)"), line
