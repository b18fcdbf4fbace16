"""The bundled datasets in data/ and wemask_cli/resources/: layouts, sizes, correct arithmetic, and that data/generate.py reproduces them."""

from __future__ import annotations

import ast
import importlib.util
import json
import operator
import re
from fractions import Fraction
from pathlib import Path

import pytest

from wemask_cli.rewards import extract_answer

DATA = Path(__file__).resolve().parent.parent / "data"
RESOURCES = DATA.parent / "wemask_cli" / "resources"  # the sets the commands read at run time ship in the package
GENERATED = [
    "sft_chat.jsonl", "math_sft.jsonl", "math_problems.jsonl", "preferences.jsonl", "preferences_hh.jsonl",
    "locate_prompts.jsonl", "eval/perplexity.txt", "eval/choice.jsonl", "eval/math.jsonl", "eval/refusal.jsonl",
    "feedback.jsonl",
]
# An arithmetic step written as "expression = value" (solutions use * and /, chat answers × and ÷).
EQUATION = re.compile(r"(?<![\w.,])([\d(][\d,. +\-*/()×÷]*?)\s*=\s*(-?\d[\d,]*(?:\.\d+)?)")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _generator():
    spec = importlib.util.spec_from_file_location("wemask_data_generate", DATA / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _committed(name: str) -> Path:
    """Where generate.py's output lives in the checkout: data/ (training examples) or the package's resources."""
    runtime = name == "locate_prompts.jsonl" or name.startswith("eval/")
    return (RESOURCES if runtime else DATA) / name


def _rows(name: str) -> list:
    with open(_committed(name), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _value(expr: str) -> Fraction:
    def walk(node):
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        assert isinstance(node, ast.Constant), expr
        return Fraction(str(node.value))

    cleaned = expr.replace(",", "").replace("×", "*").replace("÷", "/")
    return walk(ast.parse(cleaned, mode="eval").body)


def _equations(text: str) -> list[tuple[str, Fraction, Fraction]]:
    """(expression, its value, the value written after '=') for every arithmetic step in text."""
    steps = []
    for expr, written in EQUATION.findall(text):
        while expr.count("(") > expr.count(")"):  # an opening bracket of the prose, as in "(8 ÷ 2 = 4)"
            expr = expr.replace("(", "", 1)
        steps.append((expr, _value(expr), Fraction(written.replace(",", ""))))
    return steps


def _wrong_steps(text: str) -> list[str]:
    return [expr for expr, value, written in _equations(text) if value != written]


def test_generate_all_reproduces_committed_files(tmp_path):
    _generator().generate_all(tmp_path)
    produced = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert produced == sorted(GENERATED)
    for name in GENERATED:
        stale = f"{_committed(name)} differs from what generate.py writes: run python data/generate.py"
        assert (tmp_path / name).read_bytes() == _committed(name).read_bytes(), stale


@pytest.mark.parametrize("name", GENERATED)
def test_files_are_small(name):
    assert _committed(name).stat().st_size < 200_000


@pytest.mark.parametrize(
    "name, keys, low, high",
    [
        ("sft_chat.jsonl", {"messages"}, 150, 250),
        ("math_sft.jsonl", {"prompt", "completion"}, 150, 250),
        ("math_problems.jsonl", {"question", "answer"}, 80, 150),
        ("preferences.jsonl", {"prompt", "chosen", "rejected"}, 100, 150),
        ("preferences_hh.jsonl", {"chosen", "rejected"}, 20, 40),
        ("feedback.jsonl", {"prompt", "completion", "label"}, 30, 50),
        ("eval/choice.jsonl", {"question", "choices", "answer"}, 50, 70),
        ("eval/math.jsonl", {"question", "answer"}, 30, 50),
        ("eval/refusal.jsonl", {"prompt"}, 40, 60),
    ],
)
def test_layout_and_row_counts(name, keys, low, high):
    rows = _rows(name)
    assert low <= len(rows) <= high
    for row in rows:
        assert set(row) == keys
        assert all(value not in ("", [], None) for value in row.values())


def test_sft_chat_is_correct():
    rows = _rows("sft_chat.jsonl")
    assert len({row["messages"][0]["content"] for row in rows}) == len(rows)
    for row in rows:
        (user, assistant) = row["messages"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert user["content"].strip() and assistant["content"].strip()
        answer = assistant["content"]
        assert not _wrong_steps(answer), answer
        if m := re.fullmatch(r"'(\w+)' reversed is '(\w+)'\.", answer):
            assert m.group(2) == m.group(1)[::-1]
        if m := re.search(r"The letter '(\w)' appears (\d+) times in '(\w+)'", answer):
            assert m.group(3).count(m.group(1)) == int(m.group(2))
        if m := re.search(r"The letter '(\w)' appears once in '(\w+)'", answer):
            assert m.group(2).count(m.group(1)) == 1
        if m := re.search(r"The letter '(\w)' does not appear in '(\w+)'", answer):
            assert m.group(1) not in m.group(2)
        if m := re.fullmatch(r'How many words are in this sentence: "(.+)"', user["content"]):
            assert answer == f"The sentence has {len(m.group(1).split())} words."
        if m := re.search(r": ([\d, ]+)\.$", user["content"]):
            numbers = [int(n) for n in m.group(1).split(", ")]
            ordered = sorted(numbers, reverse="descending" in user["content"])
            assert answer.endswith(", ".join(map(str, ordered)) + ".")
        if m := re.fullmatch(r"Sort these words alphabetically: (.+)\.", user["content"]):
            assert answer.endswith(", ".join(sorted(m.group(1).split(", "))) + ".")


@pytest.mark.parametrize(
    "name, question, solution",
    [("math_sft.jsonl", "prompt", "completion"), ("math_problems.jsonl", "question", "answer"),
     ("eval/math.jsonl", "question", "answer")],
)
def test_math_solutions_are_consistent(name, question, solution):
    rows = _rows(name)
    assert len({row[question] for row in rows}) == len(rows)
    for row in rows:
        text = row[solution]
        body, final = text.rsplit("\n#### ", 1)
        assert re.fullmatch(r"\d+", final), text
        assert extract_answer(text) == final
        steps = _equations(body)
        assert steps and not _wrong_steps(body), text
        assert steps[-1][2] == int(final), text
        if name == "eval/math.jsonl":
            assert len(steps) <= 2


def test_math_sets_do_not_overlap():
    train = {row["prompt"] for row in _rows("math_sft.jsonl")}
    train |= {row["question"] for row in _rows("math_problems.jsonl")}
    assert len(train) == 300
    assert not train & {row["question"] for row in _rows("eval/math.jsonl")}
    assert not train & {row["prompt"] for row in _rows("preferences.jsonl")}


def test_preferences():
    gen = _generator()
    rows = _rows("preferences.jsonl")
    assert len({row["prompt"] for row in rows}) == len(rows)
    math_rows = [row for row in rows if row["chosen"].endswith(".") and "\nThe answer is " in row["chosen"]]
    risky_rows = [row for row in rows if row["rejected"] in gen.REFUSALS]
    assert len(math_rows) == len(risky_rows) == len(rows) // 2
    for row in rows:
        assert all(isinstance(row[k], str) for k in ("prompt", "chosen", "rejected"))
        assert row["chosen"] != row["rejected"]
    for row in math_rows:
        assert not _wrong_steps(row["chosen"]), row["chosen"]
        assert len(_wrong_steps(row["rejected"])) == 1, row["rejected"]
        assert extract_answer(row["chosen"]) != extract_answer(row["rejected"])
    templates = {template for template, _ in gen.RISKY}
    assert len(templates) >= 25


def test_feedback_is_unpaired_and_labelled_by_its_answer():
    gen = _generator()
    rows = _rows("feedback.jsonl")
    assert len({row["prompt"] for row in rows}) == len(rows)
    assert sum(row["label"] is True for row in rows) == sum(row["label"] is False for row in rows) == len(rows) // 2
    for row in rows:
        math = "\nThe answer is " in row["completion"]
        if row["label"]:
            assert row["completion"] not in gen.REFUSALS and not (math and _wrong_steps(row["completion"])), row
        else:
            assert row["completion"] in gen.REFUSALS or len(_wrong_steps(row["completion"])) == 1, row


def test_preferences_hh():
    for row in _rows("preferences_hh.jsonl"):
        chosen, rejected = row["chosen"], row["rejected"]
        assert len(chosen) == len(rejected) and len(chosen) % 2 == 0
        assert chosen[:-1] == rejected[:-1] and chosen[-1] != rejected[-1]
        assert [m["role"] for m in chosen] == ["user", "assistant"] * (len(chosen) // 2)
        assert all(isinstance(m["content"], str) and m["content"] for m in chosen + rejected)


def test_locate_prompts():
    rows = _rows("locate_prompts.jsonl")
    assert len(rows) == 16
    texts = [row["text"] for row in rows if set(row) == {"text"}]
    chats = [row["messages"] for row in rows if set(row) == {"messages"}]
    assert len(texts) + len(chats) == 16 and len(chats) == 4
    assert min(len(t.split()) for t in texts) <= 3
    assert max(len(t.split()) for t in texts) <= 400
    assert any("def " in t for t in texts)
    for messages in chats:
        assert messages[-1]["role"] == "user"
        assert all(m["role"] in ("system", "user", "assistant") and m["content"] for m in messages)


def test_eval_perplexity_text():
    text = _committed("eval/perplexity.txt").read_text(encoding="utf-8")
    assert 2500 <= len(text.split()) <= 4000
    assert text.isascii() and "  " not in text


def test_eval_choice():
    rows = _rows("eval/choice.jsonl")
    assert len({row["question"] for row in rows}) == len(rows)
    for row in rows:
        assert len(row["choices"]) == 4 and len(set(row["choices"])) == 4
        assert row["answer"] in range(4)
    positions = [row["answer"] for row in rows]
    assert all(positions.count(i) >= len(rows) // 6 for i in range(4))


def test_eval_refusal_prompts_are_new():
    prompts = [row["prompt"] for row in _rows("eval/refusal.jsonl")]
    assert len(set(prompts)) == len(prompts)
    seen = {row["prompt"] for row in _rows("preferences.jsonl")}
    seen |= {row["chosen"][-2]["content"] for row in _rows("preferences_hh.jsonl")}
    assert not seen & set(prompts)
