"""sft trains on the responses by default, for every chat layout (TRL's assistant_only_loss / completion_only_loss,
as LLaMA-Factory does); --train-on-prompt trains on everything; a template without generation markers that wemask
cannot mark is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_main

PAIRS = [json.loads(line) for line in (Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl").read_text().splitlines()[:8]]
SHORT = ("--max-steps", "1", "--logging-steps", "1", "--per-device-train-batch-size", "4", "--max-length", "96",
         "--save-strategy", "no", "--report-to", "none")  # fmt: skip


def layouts(folder: Path) -> dict[str, Path]:
    """The same 8 question/answer pairs as Alpaca, ShareGPT and messages files."""
    rows = {
        "alpaca": [{"instruction": p["messages"][0]["content"], "input": "", "output": p["messages"][1]["content"]} for p in PAIRS],
        "sharegpt": [{"conversations": [{"from": "human", "value": p["messages"][0]["content"]},
                                        {"from": "gpt", "value": p["messages"][1]["content"]}]} for p in PAIRS],
        "messages": PAIRS,
    }  # fmt: skip
    paths = {}
    for name, found in rows.items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in found))
    return paths


def first_loss(monkeypatch, capsys, model: str, data: Path, out: Path, *extra: str) -> float:
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", model, "--dataset", str(data), "-o", str(out), *SHORT, *extra)
    assert code == 0, err
    history = json.loads((out / "metrics.json").read_text())["loss_history"]
    return history[0][1]


def test_every_chat_layout_trains_on_the_responses(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """Alpaca (prompt/completion) and ShareGPT/messages (conversations) give the same first loss: the same tokens
    are trained; --train-on-prompt trains the user turns too (another loss). Before: ShareGPT trained everything."""
    paths = layouts(tmp_path)
    losses = {name: first_loss(monkeypatch, capsys, tiny_model_dir, path, tmp_path / name) for name, path in paths.items()}
    assert losses["alpaca"] == pytest.approx(losses["sharegpt"], rel=1e-5) == pytest.approx(losses["messages"], rel=1e-5)
    whole = first_loss(monkeypatch, capsys, tiny_model_dir, paths["sharegpt"], tmp_path / "whole", "--train-on-prompt")
    assert abs(whole - losses["sharegpt"]) > 1e-3
    saved = (tmp_path / "sharegpt" / "chat_template.jinja").read_text()
    assert "{% generation %}" in saved  # the marked template renders the same text (below), saved with the run


def test_the_marked_chatml_template_renders_the_same_text(tiny_tokenizer):
    from wemask_cli.train.chat_templates import PROBE, training_chat_template

    patched = training_chat_template(tiny_tokenizer, "tiny")
    assert patched and "{% generation %}" in patched
    assert tiny_tokenizer.apply_chat_template(PROBE, tokenize=False, chat_template=patched) == \
        tiny_tokenizer.apply_chat_template(PROBE, tokenize=False)
    marked = tiny_tokenizer.apply_chat_template(PROBE, chat_template=patched, return_dict=True, return_assistant_tokens_mask=True)
    ids = [i for i, m in zip(marked["input_ids"], marked["assistant_masks"]) if m]
    assert tiny_tokenizer.decode(ids) == "A1<|im_end|>\nA2<|im_end|>\n"


def test_a_template_without_markers_is_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """TRL's 'chat template is not training-compatible' ValueError was a traceback labelled a bug in wemask."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    data = layouts(tmp_path)["sharegpt"]
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", str(model), "--dataset", str(data), "-o", str(tmp_path / "o"),
                            *SHORT, "--assistant_only_loss", "true")  # fmt: skip
    assert code == 2 and "Traceback" not in err and "bug" not in err
    assert "{% generation %} ... {% endgeneration %}" in err.splitlines()[-1] and "--train-on-prompt" in err
    assert first_loss(monkeypatch, capsys, str(model), data, tmp_path / "whole", "--train-on-prompt") > 0


@pytest.mark.embedded
def test_the_embedded_models_template_gets_the_generation_markers(embedded_dir):
    """SmolLM2's ChatML template (default system prompt included) renders the same text, replies marked."""
    from transformers import AutoTokenizer

    from wemask_cli.train.chat_templates import PROBE, training_chat_template

    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    assert "{% generation %}" not in tokenizer.chat_template
    patched = training_chat_template(tokenizer, embedded_dir)
    messages = PROBE[1:]  # no system message: the template adds its default one
    assert tokenizer.apply_chat_template(messages, tokenize=False, chat_template=patched) == tokenizer.apply_chat_template(messages, tokenize=False)
    marked = tokenizer.apply_chat_template(messages, chat_template=patched, return_dict=True, return_assistant_tokens_mask=True)
    ids = [i for i, m in zip(marked["input_ids"], marked["assistant_masks"]) if m]
    assert tokenizer.decode(ids) == "A1<|im_end|>\nA2<|im_end|>\n"
