"""eval's outputs and inputs: folders that never collide, checks before loading, left truncation, provenance,
few-shot, --batch-size auto, nested columns, the verl layout and plain text files of any name."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.eval.data import EvalData
from wemask_cli.eval.settings import EvalSettings
from wemask_cli.eval.tasks import ChoiceTask, MathTask
from wemask_cli.eval.tasks.resolve import resolve
from wemask_cli.models import loading as models_module

CHOICE_ROWS = [{"question": f"What is {i} plus {i}?", "choices": [str(2 * i), str(2 * i + 1), "no"], "answer": 0} for i in range(8)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def counting_loads(monkeypatch) -> list:
    loads, real = [], models_module.load_model
    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    return loads


def test_default_output_folders_never_collide(monkeypatch, capsys, tiny_model_dir, tmp_path):
    import wemask_cli.commands.eval as command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command.time, "strftime", lambda fmt, *a: "20260101-000000")  # both runs in the same second
    for _ in range(2):
        code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--limit", "1")
        assert code == 0, err
    folders = sorted(p.name for p in (tmp_path / "runs" / "eval").iterdir())
    assert folders == ["perplexity-20260101-000000", "perplexity-20260101-000000-2"]
    assert all((tmp_path / "runs" / "eval" / f / "metrics.json").is_file() for f in folders)


def test_output_is_claimed_and_checked_before_data_or_model(monkeypatch, capsys, tiny_model_dir, tmp_path):
    loads = counting_loads(monkeypatch)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "math",
                            "--data", str(tmp_path / "missing.jsonl"), "--output", str(blocker / "out"))
    assert code == 2 and err.count("\n") == 1 and "a-file is a file" in err and loads == []  # not the data error
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".wemask.lock").write_text(json.dumps({"pid": 1, "host": __import__("socket").gethostname(), "command": "wemask eval"}))
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--output", str(busy))
    assert code == 2 and "is in use by `wemask eval`" in err and loads == []


@pytest.mark.parametrize("task", ["choice", "refusal"])
def test_over_long_prompts_are_cut_from_the_left_with_one_warning(monkeypatch, capsys, tiny_model_dir, tmp_path, task):
    long = "The quick brown fox jumps over the lazy dog. " * 80 + "What is 12 plus 30?"  # far over 256 positions
    rows = [{"question": long, "choices": ["42", "72"], "answer": 0}, {"question": "What is 2 plus 2?", "choices": ["4", "5"], "answer": 0}]
    data = write_jsonl(tmp_path / "d.jsonl", rows if task == "choice" else [{"prompt": "\n".join([long] * 3)}, {"prompt": "hi"}])
    out = tmp_path / "o"
    code, stdout, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", task, "--data", str(data),
                                 "--max-new-tokens" if task == "refusal" else "--limit", "4", "--output", str(out))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "truncated from the left" in line]
    assert len(warnings) == 1 and warnings[0].startswith("wemask: warning: 1 ")
    records = read_jsonl(out / "examples.jsonl")
    assert [r.get("truncated", False) for r in records] == [True, False]
    assert "quick brown fox" not in stdout  # the table never prints prompts


def test_metrics_and_examples_carry_provenance(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = write_jsonl(tmp_path / "c.jsonl", CHOICE_ROWS)
    out = tmp_path / "o"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "choice", "--data", str(data),
                            "--num-fewshot", "2", "--batch-size", "auto", "--output", str(out))
    assert code == 0, err
    doc = json.loads((out / "metrics.json").read_text())
    prov = doc["provenance"]
    assert set(prov["versions"]) == {"wemask-cli", "torch", "transformers", "trl"} and prov["versions"]["torch"]
    assert prov["model"]["path"] == tiny_model_dir
    assert prov["tokenizer"]["eos_token"] == "<|im_end|>" and prov["tokenizer"]["bos_token"] is None
    assert len(prov["tokenizer"]["chat_template_sha256"]) == 64
    assert prov["data"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest() and prov["data"]["reader"] == "jsonl"
    assert "--num-fewshot 2" in prov["command"] and prov["started"] and prov["duration_s"] > 0
    assert doc["settings"]["num_fewshot"] == 2 and doc["settings"]["fewshot_seed"] == 1234
    assert isinstance(doc["settings"]["batch_size"], int) and "--batch-size auto: " in err
    records = read_jsonl(out / "examples.jsonl")
    for index, record in enumerate(records):
        assert record["prompt"].count("Question:") == 3 and len(record["fewshot"]) == 2 and index not in record["fewshot"]
        assert record["continuations"] == [" " + c for c in CHOICE_ROWS[index]["choices"]]
        assert record["run"]["data_sha256"] == prov["data"]["sha256"] and record["run"]["model"] == tiny_model_dir


def test_fewshot_draws_are_seeded_and_chat_turns(tiny_tokenizer):
    rows = [{"question": f"What is {i} times 3?", "answer": f"#### {3 * i}"} for i in range(6)]
    data = EvalData("math", "rows", rows=rows)
    prepared = [MathTask(resolve(EvalSettings(task="math", num_fewshot=2))).prepare(tiny_tokenizer, data, 256) for _ in range(2)]
    assert prepared[0].payload[4] == prepared[1].payload[4]  # the same draw for the same seed
    text = prepared[0].payload[2][0]
    assert text.count("<|im_start|>user") == 3 and text.count("<|im_start|>assistant") == 3  # 2 shots + the question
    other = MathTask(resolve(EvalSettings(task="math", num_fewshot=2, fewshot_seed=7))).prepare(tiny_tokenizer, data, 256)
    assert other.payload[4] != prepared[0].payload[4]


def test_dotted_field_paths(tmp_path):
    rows = [{"doc": {"q": "2+2?", "opts": ["3", "4"]}, "label": {"idx": 1}}, {"doc": {"q": "1+1?", "opts": ["2", "5"]}, "label": {"idx": 0}}]
    data = write_jsonl(tmp_path / "nested.jsonl", rows)
    settings = EvalSettings(task="choice", data=str(data), question_field="doc.q", choices_field="doc.opts", answer_field="label.idx")
    loaded = ChoiceTask(resolve(settings)).load()
    assert loaded.rows == [{"question": "2+2?", "choices": ["3", "4"], "answer": 1}, {"question": "1+1?", "choices": ["2", "5"], "answer": 0}]
    with pytest.raises(Exception, match="'doc' holds q, opts"):
        ChoiceTask(resolve(EvalSettings(task="choice", data=str(data), question_field="doc.question", choices_field="doc.opts",
                                answer_field="label.idx"))).load()


def test_verl_layout_works_for_math_without_flags(tmp_path, tiny_tokenizer):
    question = "What is 2 + 2? Let's think step by step and output the final answer after '####'."
    rows = [{"data_source": "gsm8k", "prompt": [{"role": "user", "content": question}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": "4"}, "extra_info": {"index": 0, "split": "test"}}] * 2
    task = MathTask(resolve(EvalSettings(task="math", data=str(write_jsonl(tmp_path / "verl.jsonl", rows)))))
    data = task.load()
    assert data.fields == {"question": "prompt", "answer": "reward_model.ground_truth", "layout": "verl"}
    assert data.rows[0]["answer"] == "4"
    text = task.prepare(tiny_tokenizer, data, 256).payload[2][0]
    assert text == f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"  # the messages as is, templated once


def test_a_text_file_without_extension_works_for_perplexity(monkeypatch, capsys, tiny_model_dir, tmp_path):
    license_file = tmp_path / "LICENSE"
    license_file.write_text("Permission is hereby granted, free of charge, to any person obtaining a copy. " * 20)
    out = tmp_path / "o"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--data",
                            str(license_file), "--window", "64", "--output", str(out))
    assert code == 0, err
    assert f"on --data {license_file}, read as text (UTF-8)" in err
    assert json.loads((out / "metrics.json").read_text())["provenance"]["data"]["reader"] == "text (UTF-8)"
