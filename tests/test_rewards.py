"""Answer extraction, matching and the GRPO reward functions (no model)."""

from __future__ import annotations

import math
import re

import pytest

from wemask_cli.rewards import (
    BUILTIN_REWARDS,
    answers_match,
    extract_answer,
    format_reward,
    load_reward,
    load_rewards,
    math_reward,
    normalize_answer,
    parse_reward_spec,
)
from wemask_cli.runtime.errors import WeMaskError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She pays 1,000 + 234 = 1,234 dollars.\n#### 1,234", "1234"),
        ("#### 5\nlater text\n#### 7", "7"),
        (r"So the result is $\boxed{\frac{3}{4}}$.", "3/4"),
        (r"\boxed{2} was wrong, the right one is \boxed{\{1, 2\}}", r"\{1,2\}"),
        (r"\boxed{\frac{1}{\sqrt{2}}} is the answer", r"\frac{1}{\sqrt{2}}"),
        (r"The ratio is $\dfrac{5}{8}$", "5/8"),
        ("The temperature drops to -7 degrees. The answer is -7.", "-7"),
        ("The answer is 3.50", "3.5"),
        ("The answer is $12.00.", "12"),
        ("It costs 12 dollars in total.", "12"),
        ("The answer is 42. Let me know if you have more questions!", "42"),
        ("Final answer: 5 cm", "5"),
        ("THE ANSWER IS 8", "8"),
        ("first 3 then 4 and finally 10 apples", "10"),
        ("The total is 2,500,000 people", "2500000"),
    ],
)
def test_extract_and_normalize(text, expected):
    assert normalize_answer(extract_answer(text)) == expected


@pytest.mark.parametrize("text", ["", "I have no idea.", "####   \n"])
def test_no_answer(text):
    assert extract_answer(text) is None
    assert math_reward([text], answer=["5"]) == [0.0]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("3.50", "3.5"), ("7.0", "7"), ("-0", "0"), ("-0.00", "0"), ("$1,234", "1234"), ("12 dollars", "12"),
        ("5cm", "5"), ("50\\%", "50"), ("90^\\circ", "90"), ("90^{\\circ}", "90"), (r"\text{10 inches}", "10"),
        (r"\left(1,2\right)", "(1,2)"), (r"1\!000", "1000"), (r"\frac{6}{8}", "6/8"), (r"\dfrac12", "1/2"),
        ("3 / 4", "3/4"), ("x = 5", "5"), ("2x", "2x"), ("100", "100"), ("  42.  ", "42"), ("Paris", "Paris"),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("3.5", "3.50"), ("1,234", "1234"), ("$12.00", "12"), ("12 dollars", "12"), (r"\frac{3}{4}", "0.75"),
        (r"\dfrac{6}{8}", "3/4"), ("0.5", "1/2"), ("-0", "0"), ("72", "Natalia sold 48/2 = 24 clips.\n#### 72"),
        ("0.3333333", "1/3"), (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}"), ("x^2+1", "1+x^2"), ("Paris", "Paris"),
        ("5", 5), ("2.5", 2.5),
    ],
)
def test_answers_match_true(prediction, reference):
    assert answers_match(prediction, reference)


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("3.6", "3.5"), ("12", "120"), (None, "5"), ("", "5"), ("4", "#### 5"), ("1", "1+x^2"), ("-5", "5"),
        ("Paris", "London"), ("0.333", "1/3"),
    ],
)
def test_answers_match_false(prediction, reference):
    assert not answers_match(prediction, reference)


def test_unreadable_answers_are_false_not_errors():
    assert answers_match(r"\frac{", "}{") is False
    assert answers_match("1/0", "1") is False


def test_math_reward_strings_and_conversations():
    completions = [
        "2 + 3 = 5\n#### 5",
        [{"role": "assistant", "content": "The answer is 6."}],
        [{"role": "user", "content": "ignored"}, {"role": "assistant", "content": r"$\boxed{0.5}$"}],
        "no idea",
    ]
    assert math_reward(completions, answer=["Adding gives 5.\n#### 5", "7", "1/2", "3"]) == [1.0, 0.0, 1.0, 0.0]


def test_math_reward_needs_answer_column():
    with pytest.raises(WeMaskError, match="answer"):
        math_reward(["#### 5"], prompts=["p"])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("First 2 + 3 = 5.\n#### 5", 1.0),
        ("#### 5\n\n  ", 1.0),
        (r"So we get $\boxed{\frac{3}{4}}$.", 1.0),
        (r"\[\boxed{12}\]", 1.0),
        ("2 + 2 = 4. The answer is 4.", 1.0),
        ("So the final answer is 3.5 dollars", 1.0),
        ("The answer is \\$18.", 1.0),
        ("The answer is \u22125.", 1.0),
        ("The answer is 6.02e23.", 1.0),
        ("The answer is 42. Let me know if you need more help.", 0.0),
        (r"\boxed{5} and then more words", 0.0),
        ("#### 5 was my guess but actually\nit is 6", 0.0),
        ("The total is 42.", 0.0),
        ("The answer is 42\nand some more words", 0.0),
        ("", 0.0),
    ],
)
def test_format_reward(text, expected):
    assert format_reward([text]) == [expected]
    assert format_reward([[{"role": "assistant", "content": text}]]) == [expected]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("math", ("math", 1.0)),
        ("math:0.5", ("math", 0.5)),
        ("format:2", ("format", 2.0)),
        ("path/to/file.py:func", ("path/to/file.py:func", 1.0)),
        ("path/to/file.py:func:2.0", ("path/to/file.py:func", 2.0)),
        ("pkg.module:func", ("pkg.module:func", 1.0)),
        ("pkg.module:func:0", ("pkg.module:func", 0.0)),
    ],
)
def test_parse_reward_spec(spec, expected):
    assert parse_reward_spec(spec) == expected


@pytest.mark.parametrize("spec", ["math:abc", "file.py:func:x", "math:-1", "math:nan", "", "a:b:c:d", "file.py::1"])
def test_parse_reward_spec_errors(spec):
    with pytest.raises(WeMaskError):
        parse_reward_spec(spec)


REWARD_FILE = '''
def good(completions, **kwargs):
    return [float(len(c)) for c in completions]

def keyword_only(*, completions, answer=None, **kwargs):
    return [0.0] * len(completions)

def no_completions(prompts, **kwargs):
    return []

def no_kwargs(completions):
    return []

not_callable = 3
'''


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    return path


def test_load_builtin_rewards():
    assert load_reward("math") is BUILTIN_REWARDS["math"]
    funcs, weights = load_rewards(["math", "format:0.25"])
    assert funcs == [BUILTIN_REWARDS["math"], BUILTIN_REWARDS["format"]] and weights == [1.0, 0.25]


def test_load_reward_from_file(reward_file):
    func = load_reward(f"{reward_file}:good")
    assert func.__name__ == "good"
    assert func(prompts=["p"], completions=["abc"], completion_ids=[[1]], trainer_state=None) == [3.0]
    assert load_reward(f"{reward_file}:keyword_only").__name__ == "keyword_only"
    funcs, weights = load_rewards([f"{reward_file}:good:0.5"])
    assert funcs[0].__name__ == "good" and weights == [0.5]


def test_load_reward_from_module():
    assert load_reward("wemask_cli.rewards:format_reward") is BUILTIN_REWARDS["format"]


@pytest.mark.parametrize(
    "target, message",
    [
        ("{dir}/missing.py:good", "does not exist"),
        ("{file}:absent", "not found"),
        ("{file}:not_callable", "not a function"),
        ("{file}:no_completions", "wrong signature"),
        ("{file}:no_kwargs", "wrong signature"),
        ("no_such_module_xyz:func", "cannot be imported"),
        ("wemask_cli.rewards:nothing_here", "not found"),
        ("unknown_reward", "unknown reward"),
    ],
)
def test_load_reward_errors(reward_file, target, message):
    target = target.format(dir=reward_file.parent, file=reward_file)
    with pytest.raises(WeMaskError, match=message) as excinfo:
        load_reward(target)
    assert "\n" not in str(excinfo.value)


def test_load_reward_file_that_fails(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def f(completions, **kwargs):\n    return [\n")
    with pytest.raises(WeMaskError, match="failed to load") as excinfo:
        load_reward(f"{path}:f")
    assert "\n" not in str(excinfo.value)


# --- a user's reward, checked as TRL calls it ------------------------------------------------------------------


def test_a_function_named_nan_or_inf_is_a_name_not_a_weight():
    assert parse_reward_spec("my_rewards.py:nan") == ("my_rewards.py:nan", 1.0)
    assert parse_reward_spec("pkg.mod:inf") == ("pkg.mod:inf", 1.0)
    assert parse_reward_spec("my_rewards.py:nan:0.5") == ("my_rewards.py:nan", 0.5)
    with pytest.raises(WeMaskError, match="must be a number"):
        parse_reward_spec("my_rewards.py:fn:nan")


CHECKED_FILE = '''
import math

def nan(completions, **kwargs):
    return [math.nan] * len(completions)

def short(completions, **kwargs):
    return [1.0]

def words(completions, **kwargs):
    return ["good"] * len(completions)

def nothing(completions, **kwargs):
    return None

def some_none(completions, **kwargs):
    return [None] + [1.0] * (len(completions) - 1)

def infinite(completions, **kwargs):
    return [math.inf] * len(completions)

def broken(completions, **kwargs):
    return 1 / 0

async def later(completions, **kwargs):
    return [2.0] * len(completions)
'''


@pytest.mark.parametrize(
    "name, message",
    [
        ("nan", "returned no number for any of the 3 completions (all NaN or None)"),
        ("short", "returned 1 values for 3 completions"),
        ("words", "returned a str ('good') for completion 0: rewards must be numbers"),
        ("nothing", "returned NoneType ('None'), not a list"),
        ("infinite", "returned inf for completion 0: rewards must be finite"),
    ],
)
def test_bad_reward_answers_are_one_line(tmp_path, name, message):
    (tmp_path / "checked.py").write_text(CHECKED_FILE)
    (func,), _ = load_rewards([f"{tmp_path / 'checked.py'}:{name}"])
    assert func.__name__ == name  # TRL names the reward by it in its logs
    with pytest.raises(WeMaskError, match=re.escape(message)):
        func(prompts=["a", "b", "c"], completions=["x", "y", "z"])


def test_good_answers_pass_and_errors_in_user_code_are_marked_theirs(tmp_path, capsys):
    import asyncio

    (tmp_path / "checked.py").write_text(CHECKED_FILE)
    path = tmp_path / "checked.py"
    (some_none, nan, broken, later), _ = load_rewards([f"{path}:some_none", f"{path}:nan", f"{path}:broken", f"{path}:later"])
    assert some_none(completions=["x", "y"]) == [None, 1.0]
    assert math.isnan(nan(completions=["x"])[0])  # with other rewards: a warning, not an error
    assert "returned no number" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):
        broken(completions=["x"])
    assert "raised inside your reward function" in capsys.readouterr().err
    assert asyncio.run(later(completions=["x", "y"])) == [2.0, 2.0]
