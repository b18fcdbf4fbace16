"""Alpaca and ShareGPT files (LLaMA-Factory's and axolotl's layouts) load as they are, for sft, dpo and grpo."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.data import load_training_data
from wemask_cli.data.formats import PREFERENCE, PROMPTS, SUPERVISED
from wemask_cli.runtime.errors import WeMaskError

ALPACA = [
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
    {"instruction": "Name a colour.", "input": "", "output": "Blue", "system": "Be brief.",
     "history": [["Hi", "Hello!"]]},
]
SHAREGPT = [
    {"conversations": [{"from": "human", "value": "What is 2+3?"}, {"from": "gpt", "value": "5"}],
     "system": "Be brief."},
    {"conversations": [{"from": "system", "value": "Use tools."}, {"from": "human", "value": "Weather?"},
                       {"from": "function_call", "value": "{\"name\": \"w\"}"}, {"from": "observation", "value": "sun"},
                       {"from": "gpt", "value": "Sunny."}]},
]
SHAREGPT_DPO = [
    {"conversations": [{"from": "human", "value": "Say hi."}],
     "chosen": {"from": "gpt", "value": "Hi!"}, "rejected": {"from": "gpt", "value": "No."}},
]


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_alpaca_joins_instruction_and_input_as_llama_factory_does(tmp_path):
    dataset, fmt = load_training_data(SUPERVISED, write_jsonl(tmp_path / "a.jsonl", ALPACA))
    assert fmt.name.startswith("alpaca") and dataset.column_names == ["prompt", "completion"]
    assert dataset[0]["prompt"] == [{"role": "user", "content": "Add the numbers.\n2 and 3"}]
    assert dataset[0]["completion"] == [{"role": "assistant", "content": "5"}]
    assert dataset[1]["prompt"] == [  # an empty input is left out; system and history come first
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a colour."},
    ]


def test_alpaca_for_dpo_and_grpo(tmp_path):
    rows = [{"instruction": "Say hi.", "input": "", "chosen": "Hi!", "rejected": "No."}]
    dataset, fmt = load_training_data(PREFERENCE, write_jsonl(tmp_path / "p.jsonl", rows))
    assert fmt.columns == ("prompt", "chosen", "rejected")
    assert dataset[0]["chosen"] == [{"role": "assistant", "content": "Hi!"}]
    dataset, fmt = load_training_data(PROMPTS, write_jsonl(tmp_path / "g.jsonl", ALPACA))
    assert dataset["answer"] == ["5", "Blue"] and dataset[0]["prompt"][-1]["content"] == "Add the numbers.\n2 and 3"


def test_sharegpt_maps_roles_and_the_system_column(tmp_path):
    dataset, fmt = load_training_data(SUPERVISED, write_jsonl(tmp_path / "s.jsonl", SHAREGPT))
    assert fmt.name.startswith("sharegpt") and dataset.column_names == ["messages"]
    assert [m["role"] for m in dataset[0]["messages"]] == ["system", "user", "assistant"]
    assert [m["role"] for m in dataset[1]["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    dataset, _ = load_training_data(PROMPTS, write_jsonl(tmp_path / "g.jsonl", SHAREGPT))
    assert dataset["answer"] == ["5", "Sunny."] and dataset[0]["prompt"][-1] == {"role": "user", "content": "What is 2+3?"}


def test_sharegpt_preferences(tmp_path):
    dataset, fmt = load_training_data(PREFERENCE, write_jsonl(tmp_path / "d.jsonl", SHAREGPT_DPO))
    assert fmt.name.startswith("sharegpt") and dataset[0] == {
        "prompt": [{"role": "user", "content": "Say hi."}],
        "chosen": [{"role": "assistant", "content": "Hi!"}],
        "rejected": [{"role": "assistant", "content": "No."}],
    }


@pytest.mark.parametrize(("rows", "message"), [
    ([{"instruction": "x", "output": None}], r"bad.jsonl line 1 has no 'output'"),
    ([{"instruction": "x", "output": "y", "history": ["nope"]}], r"'history' must be a list of \[question, answer\]"),
    ([{"conversations": [{"from": "alien", "value": "x"}]}], r"turn 1 has 'from' 'alien'; ShareGPT roles are human"),
])
def test_bad_rows_name_the_row(tmp_path, rows, message):
    with pytest.raises(WeMaskError, match=message):
        load_training_data(SUPERVISED, write_jsonl(tmp_path / "bad.jsonl", rows))


@pytest.mark.parametrize(("stage", "rows"), [("sft", ALPACA), ("sft", SHAREGPT), ("dpo", SHAREGPT_DPO * 2)])
def test_layouts_train_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir, stage, rows):
    data, out = write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, stage, "--model", tiny_model_dir, "--dataset", data, "-o", str(out),
                            "--mask-rate", "0.3", "--me-layer", "1", "--max-steps", "1", "--save-strategy", "no",
                            "--per-device-train-batch-size", "2", "--report-to", "none")
    assert code == 0, err
    record = json.loads((out / "wemask_run.json").read_text())
    assert record["data_format"].split()[0] in {"alpaca", "sharegpt"}
    assert record["data_sha256"] == hashlib.sha256(Path(data).read_bytes()).hexdigest()  # report tells data apart by it
    assert json.loads((out / "metrics.json").read_text())["global_step"] == 1
