"""Small input checks: NaN or infinite temperatures, dims listed twice."""

from __future__ import annotations

import pytest
from conftest import run_main

from wemask_cli.data.formats import SUPERVISED
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError


@pytest.mark.parametrize("command", [("infer", "-p", "hi"), ("eval", "--task", "math", "--limit", "1")])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_temperature_that_is_not_a_finite_number_is_refused(command, value, monkeypatch, capsys, tiny_model_dir):
    code, _, err = run_main(monkeypatch, capsys, *command, "--model", tiny_model_dir, "--temperature", value)
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"wemask: error: --temperature {value} is not valid: use 0 (greedy) or a positive number to sample"
    ), err


def test_dims_listed_twice_are_refused():
    with pytest.raises(WeMaskError, match="layer 11 lists a dim twice"):
        WeMaskConfig(mask_rate=0.3, me_layer=11, dims={"11": [3, 3, 507]})


def test_a_refused_resume_in_a_folder_of_user_files_leaves_no_manifest(tmp_path, monkeypatch, capsys, tiny_model_dir):
    from pathlib import Path

    from wemask_cli.outputs import MANIFEST_NAME

    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    data = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", data, "-o", ".", "--resume")
    assert code == 2 and "has no complete checkpoint-N to resume from" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and not (tmp_path / MANIFEST_NAME).exists()


@pytest.mark.parametrize("turns, problem", [
    ([("human", "a"), ("human", "b"), ("gpt", "c")], "two human turns in a row"),
    ([("gpt", "a"), ("human", "b"), ("gpt", "c")], "it opens with an assistant turn"),
    ([("system", "s"), ("human", "a")], "it has no assistant (gpt) turn to train on"),
])
def test_sharegpt_turns_out_of_order_are_refused(turns, problem, tmp_path):
    import json
    import re

    from wemask_cli.data import load_training_data

    good = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]
    bad = {"conversations": [{"from": who, "value": text} for who, text in turns]}
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [*good, bad]))
    with pytest.raises(WeMaskError, match=re.escape(f"line 2: the conversation's turns are out of order ({problem}")):
        load_training_data(SUPERVISED, str(path))


def test_a_fifo_given_as_data_is_named_as_such(tmp_path):
    import os

    from wemask_cli.data import load_training_data
    from wemask_cli.data.readers import read_text_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(WeMaskError, match=r"--dataset .*pipe is not a regular file \(a pipe, socket or device\)"):
        load_training_data(SUPERVISED, str(fifo))
    with pytest.raises(WeMaskError, match=r"--data .*pipe is not a regular file"):
        read_text_file(fifo)
