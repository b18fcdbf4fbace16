"""Every prompt starts with BOS where the tokenizer's own metadata says so (tokenizer_config `add_bos_token`, GGUF
`tokenizer.ggml.add_bos_token`), whatever the transformers version: in locate, infer, eval and the SFT/DPO/GRPO rows
TRL tokenizes; a chat template that writes BOS gets no second one. Plain tests: run them in both environments
(transformers 5.24 in .venv, 5.19 in .venv-vllm, which ignores the GGUF flag)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bos_support import PLAIN_TEMPLATE, write_bos_folder, write_bos_gguf
from conftest import run_main

from wemask_cli.models.bos import GGUF_RECORD, adds_bos, gguf_fields
from wemask_cli.models.gguf_cache import converted_gguf_dir
from wemask_cli.models.loading import load_model
from wemask_cli.prompts.rendering import encode, encode_left_truncated

BOS_ID = 2
ROOT = Path(__file__).resolve().parents[1]
CHAT = [{"role": "user", "content": "What is 12 plus 30?"}]


@pytest.fixture(autouse=True)
def own_cache(request, monkeypatch, tmp_path):
    """The tiny GGUF conversions go to this test's cache folder ($WEMASK_CACHE, as a user would set it); the embedded
    model stays in the user's cache."""
    if request.node.get_closest_marker("embedded") is None:
        monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bos-models")
    return {
        "folder": write_bos_folder(folder / "folder"),
        "gguf": write_bos_gguf(folder / "tiny.gguf"),
        "folder-plain-template": write_bos_folder(folder / "plain", PLAIN_TEMPLATE),
        "gguf-plain-template": write_bos_gguf(folder / "plain.gguf", template=PLAIN_TEMPLATE),
    }


@pytest.fixture
def first_tokens(monkeypatch) -> list[list[int]]:
    """The real tokens of every row that starts a sequence in the tiny Llama (left padding and cached continuations
    left out): what the model was given, whichever command ran it."""
    from transformers.models.llama import modeling_llama

    seen, forward = [], modeling_llama.LlamaModel.forward

    def recording(self, input_ids=None, attention_mask=None, *args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if input_ids is not None and (cache is None or cache.get_seq_length() == 0):
            for row, ids in enumerate(input_ids.tolist()):
                padded = attention_mask is not None and attention_mask.dim() == 2
                seen.append(ids[int(attention_mask[row].argmax()) if padded else 0 :])
        return forward(self, input_ids, attention_mask, *args, **kwargs)

    monkeypatch.setattr(modeling_llama.LlamaModel, "forward", recording)
    return seen


def one_bos_first(sequences: list[list[int]]) -> bool:
    return bool(sequences) and all(s[:1] == [BOS_ID] and s[1:2] != [BOS_ID] for s in sequences)


@pytest.mark.parametrize("source", ["folder", "gguf", "folder-plain-template", "gguf-plain-template"])
def test_text_and_chat_prompts_start_with_one_bos(models, source):
    tokenizer = load_model(str(models[source])).tokenizer
    assert adds_bos(tokenizer)
    prompts = ["Hello world", CHAT, "<bos>Hello world"]  # the last one writes BOS itself
    encoded = encode(tokenizer, prompts, max_length=64)
    assert one_bos_first(encoded), encoded
    assert encoded[0] == encoded[2]
    assert tokenizer.chat_template.count("bos_token") == 1  # a template without BOS gets it once, the other keeps its own
    cut, _, cuts = encode_left_truncated(tokenizer, ["Hello world, how are you today?"], False, 4)
    assert cuts[0] > 0 and len(cut[0]) == 4 and cut[0][0] == BOS_ID  # cut from the left, BOS kept first


@pytest.mark.parametrize("flag", [False, None], ids=["says-no", "says-nothing"])
def test_a_gguf_that_asks_for_no_bos_gets_none(tmp_path, flag):
    tokenizer = load_model(str(write_bos_gguf(tmp_path / "m.gguf", add_bos=flag, template=PLAIN_TEMPLATE))).tokenizer
    assert not adds_bos(tokenizer) and encode(tokenizer, ["Hello world"], 64)[0][0] != BOS_ID
    assert tokenizer.chat_template == PLAIN_TEMPLATE


@pytest.mark.parametrize("flag", [True, False])
def test_the_gguf_header_reads_as_gguf_py_reads_it(tmp_path, flag):
    from gguf import GGUFReader

    path = write_bos_gguf(tmp_path / "m.gguf", add_bos=flag)
    fields = GGUFReader(str(path)).fields
    scalars = {key for key, field in fields.items() if len(field.types) == 1 and not key.startswith("GGUF.")}  # not arrays
    assert gguf_fields(path, scalars) == {key: fields[key].contents() for key in scalars}
    assert gguf_fields(path, {"tokenizer.ggml.add_bos_token"}) == {"tokenizer.ggml.add_bos_token": flag}


def test_a_conversion_made_before_the_fix_is_repaired_on_load(tmp_path):
    """A folder converted by an older wemask under transformers 5.19: no BOS in tokenizer.json, no record."""
    gguf = write_bos_gguf(tmp_path / "old.gguf")
    folder = converted_gguf_dir(gguf)
    assert json.loads((folder / GGUF_RECORD).read_text())["add_bos_token"] is True
    (folder / GGUF_RECORD).unlink()
    saved = json.loads((folder / "tokenizer.json").read_text())
    saved["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(saved))
    assert converted_gguf_dir(gguf) == folder and (folder / GGUF_RECORD).is_file()
    assert encode(load_model(str(gguf)).tokenizer, ["Hello world"], 64)[0][0] == BOS_ID


@pytest.mark.parametrize("source", ["folder", "gguf"])
def test_locate_json_records_that_every_prompt_starts_with_bos(monkeypatch, capsys, tmp_path, models, first_tokens, source):
    out = tmp_path / "locate.json"
    code, _, err = run_main(monkeypatch, capsys, "locate", "--model", str(models[source]), "--json", str(out),
                            "--num-prompts", "3")
    assert code == 0, err
    prompts = json.loads(out.read_text())["prompts"]
    assert [p["first_token_is_bos"] for p in prompts] == [True] * 3
    assert one_bos_first(first_tokens)


@pytest.mark.parametrize("source", ["folder", "gguf"])
@pytest.mark.parametrize("chat", ["--chat-template", "--no-chat-template"])
def test_infer_gives_the_model_bos_first(monkeypatch, capsys, models, first_tokens, chat, source):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(models[source]), "-p", "Hello world", "-p",
                            "What is 12 plus 30?", chat, "--max-new-tokens", "2")
    assert code == 0, err
    assert len(first_tokens) == 2 and one_bos_first(first_tokens), first_tokens


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def eval_tasks(folder: Path) -> dict[str, list[str]]:
    """Each eval task on a few rows, with and without the chat template (perplexity: one window, the text's start)."""
    questions = [{"question": "What is 12 plus 30?", "answer": "#### 42"}, {"question": "What is 2 times 3?", "answer": "#### 6"}]
    choices = [{"question": "The sky is", "choices": ["blue", "green"], "answer": 0}]
    text = folder / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.\n")
    return {
        "perplexity": ["--data", str(text), "--window", "64"],
        "choice": ["--data", write_rows(folder / "choice.jsonl", choices)],
        "choice-chat": ["--task", "choice", "--chat-template", "--data", write_rows(folder / "choice.jsonl", choices)],
        "math": ["--data", write_rows(folder / "math.jsonl", questions), "--max-new-tokens", "2", "--no-chat-template"],
        "math-chat": ["--task", "math", "--data", write_rows(folder / "math.jsonl", questions), "--max-new-tokens", "2"],
        "refusal": ["--limit", "2", "--max-new-tokens", "2", "--no-chat-template"],
        "lm-eval": ["--lm-eval-tasks", "bos_choice", "--lm-eval-include", str(lm_eval_task(folder, choices))],
    }


def lm_eval_task(folder: Path, rows: list[dict]) -> Path:
    """A local lm-eval multiple-choice YAML task over `rows`."""
    data = write_rows(folder / "lm_eval_choice.jsonl", rows)
    (folder / "tasks").mkdir()
    (folder / "tasks" / "bos_choice.yaml").write_text(
        f"task: bos_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
        'output_type: multiple_choice\ndoc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n"
    )
    return folder / "tasks"


@pytest.mark.parametrize("task", ["perplexity", "choice", "choice-chat", "math", "math-chat", "refusal", "lm-eval"])
def test_every_eval_task_gives_the_model_bos_first(monkeypatch, capsys, tmp_path, models, first_tokens, task):
    args = eval_tasks(tmp_path)[task]
    task_flag = [] if "--task" in args or task == "lm-eval" else ["--task", task]
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", str(models["folder"]), *task_flag, *args,
                            "--output", str(tmp_path / "out"))
    assert code == 0, err
    assert one_bos_first(first_tokens), first_tokens


SFT_TEXT = [{"text": "The quick brown fox jumps over the lazy dog."}, {"text": "What is 12 plus 30? The answer is 42."}]
TRAIN = ["--max-steps", "1", "--per-device-train-batch-size", "2", "--save-strategy", "no", "--report-to", "none"]
GRPO = ["--num-generations", "2", "--max-completion-length", "3"]


@pytest.mark.parametrize("stage, data", [
    ("sft", ROOT / "data" / "sft_chat.jsonl"), ("sft", "text"), ("dpo", ROOT / "data" / "preferences.jsonl"),
    ("grpo", ROOT / "data" / "math_problems.jsonl"), ("grpo-text", ROOT / "data" / "math_problems.jsonl"),
], ids=["sft-chat", "sft-text", "dpo", "grpo-chat", "grpo-text"])  # fmt: skip
def test_training_rows_start_with_one_bos(monkeypatch, capsys, tmp_path, models, first_tokens, stage, data):
    data = write_rows(tmp_path / "text.jsonl", SFT_TEXT) if data == "text" else str(data)
    extra = {"grpo": GRPO, "grpo-text": [*GRPO, "--no-chat-template"]}.get(stage, ["--max-length", "64"])
    code, _, err = run_main(monkeypatch, capsys, stage.removesuffix("-text"), "--model", str(models["folder"]), "--dataset", data,
                            "--dataset-split", "train[:4]", "-o", str(tmp_path / "run"), *TRAIN, *extra)
    assert code == 0, err
    assert one_bos_first(first_tokens), first_tokens[:4]
    saved = load_model(str(tmp_path / "run")).tokenizer  # the trained model's tokenizer keeps adding BOS
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    written = saved.apply_chat_template(conversation, tokenize=False)  # the template (its training markers aside)
    reference = load_model(str(models["folder"])).tokenizer  # BOS_TEMPLATE's text
    assert adds_bos(saved) and saved.chat_template.startswith("{{ bos_token }}")
    assert written == reference.apply_chat_template(conversation, tokenize=False)


@pytest.mark.embedded
def test_the_embedded_tokenizer_is_unchanged(embedded, embedded_dir):
    """SmolLM2's GGUF says add_bos_token false and its tokenizer adds none: the same ids as transformers gives."""
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(embedded_dir)
    assert json.loads((Path(embedded_dir) / GGUF_RECORD).read_text())["add_bos_token"] is False
    assert not adds_bos(embedded.tokenizer) and embedded.tokenizer.chat_template == plain.chat_template
    prompts = ["Hello world", CHAT]
    expected = [plain("Hello world")["input_ids"], plain.apply_chat_template(CHAT, add_generation_prompt=True)["input_ids"]]
    assert encode(embedded.tokenizer, prompts, 64) == expected
