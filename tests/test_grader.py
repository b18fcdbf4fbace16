"""The math grader's defects found by adversarial testing, one test each: exactness, normalisation, refusal of a
missing reference, bounded work on hostile completions, no silenced bugs, and counted unparseable answers."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from wemask_cli.rewards import (
    answers_match,
    format_reward,
    grade_answer,
    grade_completions,
    grader,
    math_reward,
)
from wemask_cli.runtime.errors import WeMaskError

HOSTILE_BOUND_S = 2.0  # generous for a loaded machine; the measured figures are printed (pytest -s)


def test_integers_compare_exactly_at_any_size():
    completions = ["The answer is 1000001.", "#### 999999", "#### 12345678"]
    assert math_reward(completions, answer=["1000000", "1000000", "12345679"]) == [0.0, 0.0, 0.0]
    assert math_reward(["#### 12345678901234567890123"], answer=["12345678901234567890123"]) == [1.0]


@pytest.mark.parametrize("completion", [r"\boxed{\$18}", r"#### \$18", r"The answer is \$18.", "The answer is $18."])
def test_escaped_dollars_are_money(completion):
    assert math_reward([completion], answer=["18"]) == [1.0]
    assert math_reward([completion.replace("18", "18.90")], answer=["18.9"]) == [1.0]


def test_unicode_minus_and_scientific_notation():
    assert math_reward(["It drops to \u22125 degrees", "#### \u22125"], answer=["-5", "-5"]) == [1.0, 1.0]
    completions = ["so 6.02e23 atoms", r"\boxed{6.02\times10^{23}}", "The answer is 6.02e23"]
    assert math_reward(completions, answer=["6.02e23", "6.02e23", "602000000000000000000000"]) == [1.0, 1.0, 1.0]


def test_the_rule_does_not_change_at_the_float_limit():
    assert answers_match("1e300", "1.0000001e300") is False
    assert answers_match("1e400", "1.0000001e400") is False
    assert answers_match("1e400", "10e399") is True


@pytest.mark.parametrize("reference", [None, "", "   "])
def test_a_missing_reference_is_an_error_not_the_string_none(reference):
    with pytest.raises(WeMaskError, match="reference answer"):
        math_reward(["The answer is None."], answer=[reference])


def test_grpo_refuses_a_null_reference_naming_the_row(tiny_tokenizer):
    from datasets import Dataset

    from wemask_cli.train import rollout_stage

    dataset = Dataset.from_dict({"prompt": ["1+1?", "2+2?", "3+3?"], "answer": ["2", None, "6"]})
    with pytest.raises(WeMaskError, match=r"--dataset row 2 has no reference answer \(None\)"):
        rollout_stage.prepare_dataset(dataset, tiny_tokenizer, None, [math_reward])
    assert rollout_stage.prepare_dataset(dataset.select([0, 2]), tiny_tokenizer, None, [math_reward]) is not None


def test_grpo_cli_refuses_a_null_reference_before_training(monkeypatch, capsys, tmp_path, tiny_model_dir):
    from wemask_cli.cli import main

    data = tmp_path / "nulls.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n" + json.dumps({"prompt": "2+2?", "answer": None}) + "\n")
    argv = ["wemask", "grpo", "--model", tiny_model_dir, "--dataset", str(data), "--output-dir", str(tmp_path / "o"),
            "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2", "--report-to", "none"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("wemask: error: ") and "row 2 has no reference answer" in last and "Traceback" not in err
    assert not (tmp_path / "o" / "metrics.json").exists()


def timed(func, *args):
    start = time.perf_counter()
    result = func(*args)
    return result, time.perf_counter() - start


def test_a_huge_exponent_is_unparseable_and_quick():
    grade, seconds = timed(grade_answer, "1e30000000", "42")
    assert grade == grader.Grade(False, parsed=False) and seconds < HOSTILE_BOUND_S
    grades, seconds = timed(grade_completions, ["The answer is 1e30000000"], ["42"])
    assert [g.parsed for g in grades] == [False] and seconds < HOSTILE_BOUND_S


@pytest.mark.parametrize(
    "answer",
    [r"9^{9^{9}}", r"10^{10^{10}}", r"((2^{9})^{9})^{9}", r"(99^{99})!", r"\Gamma(10^{99})", "100000!", "2^{99999}"],
)
def test_sympy_bombs_are_refused_before_math_verify(answer):
    grade, seconds = timed(grade_answer, answer, "5")
    assert grade == grader.Grade(False, parsed=False) and seconds < HOSTILE_BOUND_S


HOSTILE = {
    "open boxes": "\\boxed{" * 150_000,
    "nested boxes": "\\boxed{" * 125_000 + "}" * 125_000,
    "one huge #### answer": "#### " + "9" * 1_000_000,
    "a huge boxed number": "\\boxed{" + "9" * 1_000_000 + "}",
    "answer phrases": "The answer is " * 75_000,
    "open fracs": "\\frac{" * 170_000,
    "thousands": "1,000 " * 170_000,
    "braces": "{" * 1_000_000,
    "one long sentence": "so the answer is 5 " * 53_000 + ".",
    "huge exponent": "x" * 1_000_000 + " The answer is 1e30000000",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_megabyte_is_graded_quickly(name):
    text = HOSTILE[name]
    assert len(text) >= 1_000_000
    math_reward(["#### 1"], answer=[r"\frac{\sqrt{2}}{2}"])  # imports math-verify and sympy outside the timing
    rewards, graded = timed(math_reward, [text], ["42"])
    _, formatted = timed(format_reward, [text])
    print(f"\n{name}: math {graded:.3f} s, format {formatted:.3f} s")
    assert rewards == [0.0] and graded < HOSTILE_BOUND_S and formatted < HOSTILE_BOUND_S


def test_format_reward_is_linear_on_open_boxes():
    _, small = timed(format_reward, ["\\boxed{" * 4_000])  # 28 KB: took 11.7 s when each \boxed{ rescanned the rest
    _, large = timed(format_reward, ["\\boxed{" * 40_000])
    print(f"\nformat_reward: 28 KB {small:.3f} s, 280 KB {large:.3f} s")
    assert small < 0.5 and large < HOSTILE_BOUND_S


def test_math_verify_runs_off_the_main_thread():
    results = []
    worker = threading.Thread(target=lambda: results.append(
        math_reward([r"\boxed{\frac{1}{\sqrt{2}}}", r"\boxed{\sqrt{3}}"], answer=[r"\frac{\sqrt{2}}{2}"] * 2)))
    worker.start()
    worker.join(timeout=60)
    assert results == [[1.0, 0.0]]


def test_a_bug_in_the_grader_raises_instead_of_grading_zero(monkeypatch):
    def broken(_answer):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(grader, "normalize_answer", broken)
    with pytest.raises(RuntimeError, match="planted bug"):
        math_reward(["#### 42"], answer=["42"])
    with pytest.raises(RuntimeError, match="planted bug"):
        answers_match("42", "42")


def test_unparseable_answers_are_counted_and_logged():
    completions = ["#### 42", "no answer here", "The answer is 1e30000000", r"\boxed{9^{9^{9}}}", "#### 41", r"\boxed{x+1}"]
    grades = grade_completions(completions, ["42"] * 6)
    assert [g.correct for g in grades] == [True, False, False, False, False, False]
    assert [g.parsed for g in grades] == [True, False, False, False, True, True]
    logged = []
    rewards = math_reward(completions, answer=["42"] * 6, log_metric=lambda name, value: logged.append((name, value)))
    assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert logged == [("rewards/math_reward/unparseable", 3.0)]
