"""wemask_cli.data on the layouts researchers already have: nested records (dotted paths), verl's RL parquet,
folders (save_to_disk, hub snapshots), BOMs, numbers where text belongs, binary and extension-less text files."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from conftest import run_main

from wemask_cli.data import (
    VERL_ANSWER,
    check_column,
    column_value,
    is_verl,
    load_training_data,
    nested_columns,
    read_text,
    read_text_file,
    report_dropped,
)
from wemask_cli.data.formats import PROMPTS, SUPERVISED
from wemask_cli.runtime.errors import WeMaskError

QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many?"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SOLUTION = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72"


def verl_rows(count: int = 3, **extra_info) -> list[dict]:
    """Rows as verl's examples/data_preprocess/gsm8k.py writes them (the published research code's GSM8K files)."""
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{QUESTION} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "72"},
            "extra_info": extra_info or {"split": "train", "index": i, "answer": SOLUTION, "question": QUESTION},
        }
        for i in range(count)
    ]


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_parquet(path: Path, rows) -> str:
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return str(path)


WRITERS = {"jsonl": write_jsonl, "parquet": write_parquet}


# ------------------------------------------------------------------------------------------ nested column paths


def test_column_value_and_nested_columns():
    row = verl_rows(1)[0] | {"a.b": 1}
    assert column_value(row, "reward_model.ground_truth") == "72"
    assert column_value(row, "extra_info.question") == QUESTION
    assert column_value(row, "prompt.0.role") == "user"
    assert column_value(row, "a.b") == 1  # a top-level name holding a dot
    assert column_value(row, "reward_model.missing") is None
    paths = nested_columns([row])
    assert paths[:6] == ["data_source", "prompt", "ability", "reward_model", "reward_model.style", "reward_model.ground_truth"]
    assert "extra_info.answer" in paths and "prompt.0" not in paths


def test_missing_path_names_the_keys_that_exist():
    rows = verl_rows(1)
    assert check_column(rows, "extra_info.question", "--question-field", "--data x") == "extra_info.question"
    with pytest.raises(WeMaskError) as info:
        check_column(rows, "reward_model.truth", "--answer-field", "--data x")
    assert str(info.value) == "--answer-field 'reward_model.truth': --data x does not have 'reward_model.truth': 'reward_model' holds style, ground_truth"
    with pytest.raises(WeMaskError, match=r"'extra_info.index' is a value \(int\), not a record"):
        check_column(rows, "extra_info.index.x", "--answer-field", "--data x")
    with pytest.raises(WeMaskError, match=r"does not have a column 'nope' \(its columns: data_source, prompt, .*extra_info.question\)"):
        check_column(rows, "nope", "--text-field", "--data x")


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_dataset_columns_take_dotted_paths(tmp_path, kind):
    rows = [{"q": {"text": f"question {i}"}, "meta": {"gold": {"value": str(i)}}} for i in range(3)]
    path = WRITERS[kind](tmp_path / f"nested.{kind}", rows)
    dataset, fmt = load_training_data(PROMPTS, path, columns="prompt=q.text,answer=meta.gold.value")
    assert fmt.name == "prompt" and dataset["prompt"] == ["question 0", "question 1", "question 2"]
    assert dataset["answer"] == ["0", "1", "2"]
    dataset, fmt = load_training_data(SUPERVISED, path, columns="prompt=q.text,completion=meta.gold.value")
    assert dataset.column_names == ["prompt", "completion"] and dataset[2] == {"prompt": "question 2", "completion": "2"}
    with pytest.raises(WeMaskError, match=r"--dataset-columns answer=meta.gold.val: .* does not have 'meta.gold.val': 'meta.gold' holds value"):
        load_training_data(PROMPTS, path, columns="prompt=q.text,answer=meta.gold.val")


def test_dataset_columns_on_a_hub_dataset(monkeypatch):
    from wemask_cli.data import training

    hub = datasets.Dataset.from_list(verl_rows(2, question="q?", answer="a #### 1"))
    monkeypatch.setattr(training, "load_hub", lambda name, split, config, what: hub)
    dataset, fmt = load_training_data(SUPERVISED, "someone/verl-gsm8k", columns="prompt=extra_info.question,completion=extra_info.answer")
    assert fmt.name == "prompt-completion" and dataset[0] == {"prompt": "q?", "completion": "a #### 1"}
    with pytest.raises(WeMaskError, match="'someone/verl-gsm8k' does not have 'extra_info.solution': 'extra_info' holds question, answer"):
        load_training_data(SUPERVISED, "someone/verl-gsm8k", columns="completion=extra_info.solution")


# ------------------------------------------------------------------------------------------ the verl layout


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_verl_layout_for_grpo_gets_its_answer_and_keeps_the_prompt(tmp_path, kind, tiny_tokenizer):
    from wemask_cli.rewards import math_reward
    from wemask_cli.train import rollout_stage

    path = WRITERS[kind](tmp_path / f"gsm8k_train.{kind}", verl_rows())
    dataset, fmt = load_training_data(PROMPTS, path)
    assert fmt.name.startswith("verl") and dataset["answer"] == ["72"] * 3
    assert {"reward_model", "extra_info", "data_source"} <= set(dataset.column_names)  # custom rewards still get them
    for chat_template in (None, True):  # the prompt already carries its instruction: never wrapped again
        prepared = rollout_stage.prepare_dataset(dataset, tiny_tokenizer, chat_template, [math_reward])
        assert prepared[0]["prompt"] == [{"role": "user", "content": f"{QUESTION} {INSTRUCTION}"}]
    assert math_reward([SOLUTION, "#### 71"], answer=prepared["answer"][:2]) == [1.0, 0.0]


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_verl_layout_for_sft_trains_extra_info_question_and_solution(tmp_path, kind):
    dataset, fmt = load_training_data(SUPERVISED, WRITERS[kind](tmp_path / f"v.{kind}", verl_rows()))
    assert fmt.name.startswith("verl") and dataset.column_names == ["prompt", "completion"]
    assert dataset[0] == {
        "prompt": [{"role": "user", "content": QUESTION}],
        "completion": [{"role": "assistant", "content": SOLUTION}],
    }


def test_verl_parquet_trains_sft_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir):
    recipe = str(Path(__file__).resolve().parents[1] / "recipes" / "sft-tiny-cpu.yaml")
    data, out = write_parquet(tmp_path / "v.parquet", verl_rows(4)), tmp_path / "sft"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--config", recipe, "--model", tiny_model_dir, "--dataset", data,
                            "-o", str(out), "--me-layer", "1", "--max-steps", "1", "--save-strategy", "no")
    assert code == 0, err
    assert json.loads((out / "wemask_run.json").read_text())["data_format"] == "verl (prompt-completion from extra_info)"
    assert json.loads((out / "metrics.json").read_text())["global_step"] == 1


def test_verl_sft_key_order_and_fallback_to_the_prompt(tmp_path):
    both = verl_rows(1, problem="the problem", question="the question", solution="sol", answer="ans #### 1")
    dataset, _ = load_training_data(SUPERVISED, write_jsonl(tmp_path / "both.jsonl", both))
    assert dataset[0]["prompt"][0]["content"] == "the question" and dataset[0]["completion"][0]["content"] == "ans #### 1"
    no_question = verl_rows(1, split="train", solution="worked #### 72")
    dataset, _ = load_training_data(SUPERVISED, write_jsonl(tmp_path / "noq.jsonl", no_question))
    assert dataset[0]["prompt"] == no_question[0]["prompt"] and dataset[0]["completion"][0]["content"] == "worked #### 72"
    with pytest.raises(WeMaskError, match=r"extra_info holds no worked solution \(answer \| solution \| response\) for SFT \(it holds \['index', 'split'\]\)"):
        load_training_data(SUPERVISED, write_jsonl(tmp_path / "bare.jsonl", verl_rows(1, split="train", index=0)))


def test_explicit_columns_win_over_the_verl_rules(tmp_path):
    path = write_parquet(tmp_path / "v.parquet", verl_rows())
    dataset, fmt = load_training_data(PROMPTS, path, columns="answer=extra_info.answer")
    assert fmt.name == "prompt" and dataset[0]["answer"] == SOLUTION
    assert is_verl(verl_rows(1)) and not is_verl([{"prompt": "text", "reward_model": {"ground_truth": "1"}}])
    assert VERL_ANSWER == "reward_model.ground_truth"


# ------------------------------------------------------------------------------------------ issue 10: input edge cases


def test_a_utf8_bom_is_read(tmp_path):
    (tmp_path / "b.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"text": "hello"}\n')
    assert load_training_data(SUPERVISED, str(tmp_path / "b.jsonl"))[0]["text"] == ["hello"]
    (tmp_path / "b.csv").write_bytes(b"\xef\xbb\xbfprompt,completion\n2+2=,4\n")
    assert load_training_data(SUPERVISED, str(tmp_path / "b.csv"))[0][0] == {"prompt": "2+2=", "completion": "4"}
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfone prompt\n")
    assert read_text(tmp_path / "b.txt", "--input") == "one prompt\n"
    assert read_text_file(tmp_path / "b.txt") == ("one prompt\n", "text (UTF-8 with BOM)")


def test_integers_where_text_belongs_become_text(tmp_path):
    path = write_jsonl(tmp_path / "n.jsonl", [{"prompt": "2+2=", "completion": 4}, {"prompt": 7, "completion": "seven"}])
    assert load_training_data(SUPERVISED, path)[0][:] == {"prompt": ["2+2=", "7"], "completion": ["4", "seven"]}
    path = write_parquet(tmp_path / "n.parquet", [{"prompt": "2+2=", "completion": 4}])
    dataset, _ = load_training_data(SUPERVISED, path)
    assert dataset.column_names == ["prompt", "completion"] and dataset[0]["completion"] == "4"
    (tmp_path / "n.csv").write_text("prompt,completion\n1/2,0.50\n")  # CSV cells stay text: no '0.5'
    assert load_training_data(SUPERVISED, str(tmp_path / "n.csv"))[0][0] == {"prompt": "1/2", "completion": "0.50"}
    (tmp_path / "n.csv").write_text("prompt,completion\na,b\nc,d,e\n")
    with pytest.raises(WeMaskError, match="n.csv row 2 \\(line 3\\) has more fields than the header"):
        load_training_data(SUPERVISED, str(tmp_path / "n.csv"))


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"prompt": "2+2=", "completion": 4.5}], "line 1: 'completion' is a number (4.5), not text: write it as a string"),
        ([{"prompt": "c", "completion": True}], "line 1: 'completion' is a boolean (True), not text"),
        ([{"prompt": {"x": 1}, "completion": "b"}], "line 1: 'prompt' is an object with named fields, not text"),
        ([{"messages": [{"role": "user", "content": 5}]}], "line 1: 'messages' message 1 has content 5 (int), not text"),
        ([{"prompt": "a", "completion": "b"}, {"prompt": ["x"], "completion": "b"}], "line 2 has 'prompt' as a list where line 1 has a str"),
    ],
)
def test_non_text_values_are_one_line_naming_row_and_column(tmp_path, rows, message):
    with pytest.raises(WeMaskError) as info:
        load_training_data(SUPERVISED, write_jsonl(tmp_path / "bad.jsonl", rows))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_parquet_rows_are_checked_with_their_number(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", [{"prompt": "a", "completion": 1.5}, {"prompt": "b", "completion": None}])
    with pytest.raises(WeMaskError, match=r"p.parquet row 1: 'completion' is a number \(1.5\)"):
        load_training_data(SUPERVISED, path)


def test_binary_files_are_refused_on_one_line(tmp_path):
    (tmp_path / "img.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(WeMaskError, match=r"img.jsonl is a binary file \(a NUL byte at offset 8\), not text"):
        load_training_data(SUPERVISED, str(tmp_path / "img.jsonl"))
    with pytest.raises(WeMaskError, match="is a binary file"):
        read_text_file(tmp_path / "img.jsonl")
    (tmp_path / "latin").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(WeMaskError, match="is not UTF-8 text"):
        read_text_file(tmp_path / "latin")


def test_any_text_file_reads_as_text(tmp_path):
    (tmp_path / "LICENSE").write_text("MIT License\n\nPermission is hereby granted.\n", encoding="utf-8")
    assert read_text_file(tmp_path / "LICENSE") == ("MIT License\n\nPermission is hereby granted.\n", "text (UTF-8)")
    with pytest.raises(WeMaskError, match="no such file"):
        read_text_file(tmp_path / "NOTICE")
    with pytest.raises(WeMaskError, match="is a folder, not a file"):
        read_text_file(tmp_path)


# ------------------------------------------------------------------------------------------ folders


def test_a_save_to_disk_folder_loads(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(4)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    assert len(load_training_data(SUPERVISED, str(tmp_path / "saved"))[0]) == 4
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])})
    splits.save_to_disk(str(tmp_path / "dict"))
    assert len(load_training_data(SUPERVISED, str(tmp_path / "dict"), split="test")[0]) == 1
    assert load_training_data(SUPERVISED, str(tmp_path / "dict"), split="train[1:3]")[0]["prompt"] == ["p1", "p2"]
    with pytest.raises(WeMaskError, match="a saved DatasetDict\\) has no split 'validation': it has train, test"):
        load_training_data(SUPERVISED, str(tmp_path / "dict"), split="validation")


def test_a_hub_snapshot_folder_loads_by_split(tmp_path):
    snapshot = tmp_path / "gsm8k"
    (snapshot / "main").mkdir(parents=True)
    (snapshot / "socratic").mkdir()
    (snapshot / "README.md").write_text("# card")
    for config in ("main", "socratic"):
        write_parquet(snapshot / config / "train-00000-of-00002.parquet", verl_rows(2))
        write_parquet(snapshot / config / "train-00001-of-00002.parquet", verl_rows(1))
        write_parquet(snapshot / config / "test-00000-of-00001.parquet", verl_rows(1))
    dataset, fmt = load_training_data(PROMPTS, str(snapshot), config="main")
    assert len(dataset) == 3 and fmt.name.startswith("verl")
    assert len(load_training_data(PROMPTS, str(snapshot), config="main", split="test")[0]) == 1
    with pytest.raises(WeMaskError, match=r"sit in several folders \(main, socratic\): choose one with --dataset-config"):
        load_training_data(PROMPTS, str(snapshot))
    with pytest.raises(WeMaskError, match="has no files for split 'validation'; the splits its file names give: test, train"):
        load_training_data(PROMPTS, str(snapshot), config="main", split="validation")


def test_a_folder_of_jsonl_files_names_the_file_and_line(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "part-a.jsonl", [{"text": "one"}, {"text": "two"}])
    write_jsonl(folder / "part-b.jsonl", [{"text": "three"}, {"text": ""}])
    with pytest.raises(WeMaskError, match=r"shards \(part-b.jsonl line 2\): 'text' is empty"):
        load_training_data(SUPERVISED, str(folder))
    write_jsonl(folder / "part-b.jsonl", [{"text": "three"}])
    assert load_training_data(SUPERVISED, str(folder))[0]["text"] == ["one", "two", "three"]


def test_a_folder_without_data_says_what_it_accepts(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "model.safetensors").write_bytes(b"\x00")
    with pytest.raises(WeMaskError) as info:
        load_training_data(SUPERVISED, str(tmp_path))
    assert str(info.value) == (
        f"--dataset {tmp_path} is a folder without a dataset (it holds model.safetensors, notes.txt): give a "
        ".jsonl/.json/.parquet/.csv file, a folder written by datasets' save_to_disk, or a folder of such files (a hub snapshot)"
    )


# ------------------------------------------------------------------------------------------ dropped rows


def test_report_dropped(capsys):
    report_dropped("sft", 5, 5, "unused")
    assert capsys.readouterr().err == ""
    report_dropped("sft", 5, 2, "longer than --max-length 16 tokens: raise --max-length")
    assert capsys.readouterr().err == (
        "wemask: warning: sft: dropped 3 of 5 examples of --dataset (longer than --max-length 16 tokens: raise "
        "--max-length); training on 2\n"
    )
    with pytest.raises(WeMaskError, match="sft: all 5 examples of --dataset were dropped \\(too long\\): nothing is left"):
        report_dropped("sft", 5, 0, "too long")


# ------------------------------------------------------------------------------------------ the real embedded model


@pytest.mark.embedded
def test_verl_parquet_trains_grpo_and_evaluates_math_on_the_embedded_model(monkeypatch, capsys, tmp_path, embedded_dir):
    data = write_parquet(tmp_path / "gsm8k_train.parquet", verl_rows(2))
    out = tmp_path / "grpo"
    code, _, err = run_main(
        monkeypatch, capsys, "grpo", "--model", embedded_dir, "--dataset", data, "-o", str(out), "--use-peft",
        "--mask-rate", "0.3", "--me-layer", "11", "--max-steps", "1", "--num-generations", "2",
        "--per-device-train-batch-size", "2", "--max-completion-length", "16", "--save-strategy", "no",
    )
    assert code == 0, err
    record = json.loads((out / "wemask_run.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert record["data_format"].startswith("verl") and metrics["global_step"] == 1
    assert len(metrics["reward_history"]) == 1 and (out / "adapter_config.json").is_file()

    evaluation = tmp_path / "eval"
    code, _, err = run_main(
        monkeypatch, capsys, "eval", "--model", embedded_dir, "--task", "math", "--data", data, "--limit", "2",
        "--max-new-tokens", "16", "-o", str(evaluation),
    )
    assert code == 0, err
    examples = [json.loads(line) for line in (evaluation / "examples.jsonl").read_text().splitlines()]
    assert len(examples) == 2 and all(e["reference"] == "72" for e in examples)
    for example in examples:  # the verl prompt is used as is, inside the chat template, with no second instruction
        assert example["prompt"].count(INSTRUCTION) == 1 and "Solve it step by step" not in example["prompt"]
        assert "<|im_start|>user" in example["prompt"]


def test_the_data_layer_names_no_stage():
    """The data layer reads the kind a stage declares (StageSpec.data) and takes the stage's name from there: no string
    of wemask_cli/data/ but a docstring names a stage, so a new trainer is one module (train/kto.py)."""
    import ast
    import re

    from wemask_cli.train.stage_registry import builtin_specs

    specs = builtin_specs()
    named = re.compile(rf"\b({'|'.join(map(re.escape, specs))})\b")
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "wemask_cli" / "data").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.name}:{node.lineno} {node.value[:60]!r}" for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and isinstance(node.value, str) and id(node) not in docstrings and named.search(node.value)]
    assert found == []
    assert {name: spec.data.stage for name, spec in specs.items()} == {name: name for name in specs}  # named by the stage
