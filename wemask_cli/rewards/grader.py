"""Grading a final answer against a reference: exact numbers first, math-verify for symbolic answers.

Every step is bounded: answers over MAX_ANSWER_CHARS are not read, numerals are capped before `Fraction()`, and
math-verify only sees short expressions without the constructs that make sympy evaluate huge numbers (nested
powers, big exponents, factorials). Its own timeout is signal.alarm, which only works on the main thread: it is
kept there as a backstop and off elsewhere (None), where these caps alone bound the work. An answer that cannot
be read is graded incorrect and counted as unparseable, never hidden.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from wemask_cli.rewards.extract import completion_text, extract_answer
from wemask_cli.rewards.numbers import MAX_ANSWER_CHARS, is_numeral, normalize_answer, numbers_equal, parse_number
from wemask_cli.runtime.errors import WeMaskError

MATH_VERIFY_MAX_CHARS = 200
MATH_VERIFY_TIMEOUT_S = 5  # a backstop on the main thread only: math-verify's timeout is signal.alarm
_SYMPY_HAZARD_RE = re.compile(
    r"\d{41}"  # a numeral sympy would multiply out
    r"|\^\s*\{?\s*[-+]?\d{4}"  # an exponent of 1000 or more
    r"|(?:\d{4}|[^\w\s])\s*!"  # a factorial of 1000+ or of an expression
    r"|\\(?:binom|choose|sum|prod|int|lim|Gamma|operatorname)"
)
UNPARSEABLE_METRIC = "rewards/math_reward/unparseable"


@dataclass(frozen=True)
class Grade:
    """The verdict on one answer; `parsed` is False when there was no answer or the grader could not read it."""

    correct: bool
    parsed: bool


class _QuietTimeoutNotice(logging.Filter):
    """math-verify warns once that its timeout is off; our own caps bound the work instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_QUIET = _QuietTimeoutNotice()


def _backstop() -> int | None:
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _group_spans(expression: str) -> dict[int, int]:
    """{index of a closing bracket: index of its opening bracket} for (), [] and {}."""
    spans, openers = {}, []
    for index, char in enumerate(expression):
        if char in "([{":
            openers.append(index)
        elif char in ")]}" and openers:
            spans[index] = openers.pop()
    return spans


def _nested_power(expression: str) -> bool:
    """Whether a power's base or exponent holds another power: (2^{99})^{99}, 9^{9^{9}}, 2^3^4 (sympy multiplies
    such towers out). Powers side by side are fine: (x-1)^2+(y+2)^2."""
    spans = _group_spans(expression)
    closers = {start: end for end, start in spans.items()}
    for index in (i for i, char in enumerate(expression) if char == "^"):
        before = len(expression[:index].rstrip()) - 1
        if before in spans and "^" in expression[spans[before]:before]:
            return True
        after = len(expression) - len(expression[index + 1:].lstrip())
        token = re.match(r"\d+|.?", expression[after:]).group()  # a digit run, else one character
        end = closers.get(after, after + len(token) - 1)
        if "^" in expression[after:end] or expression[end + 1:].lstrip().startswith("^"):
            return True
    return False


def _math_verify_parse(expression: str):
    """math-verify's parse of a short, hazard-free expression: a list of sympy objects, empty when unreadable."""
    import math_verify
    from sympy import Basic, MatrixBase

    if len(expression) > MATH_VERIFY_MAX_CHARS or _SYMPY_HAZARD_RE.search(expression) or _nested_power(expression):
        return []
    # raise_on_error=False: math-verify turns its own latex2sympy/sympy parse errors into an empty result.
    parsed = math_verify.parse(f"${expression}$", parsing_timeout=_backstop(), raise_on_error=False)
    return [p for p in parsed if isinstance(p, (Basic, MatrixBase))]


def _math_verify_grade(pred: str, ref: str) -> Grade:
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_QUIET)
    target = _math_verify_parse(pred)
    if not target:
        return Grade(False, parsed=False)
    gold = _math_verify_parse(ref)
    return Grade(bool(gold) and math_verify.verify(gold, target, timeout_seconds=_backstop(), raise_on_error=False), True)


def grade_answer(prediction: str | None, reference) -> Grade:
    """Whether a predicted answer equals a reference (a bare answer or a GSM8K solution ending in ``#### N``)."""
    if _missing(reference):
        raise WeMaskError(f"the reference answer is {reference!r}: every example needs a non-empty answer to grade against")
    reference = str(reference)
    if "####" in reference:
        reference = extract_answer(reference) or ""
    prediction = None if prediction is None else str(prediction)
    if prediction is None or len(prediction) > MAX_ANSWER_CHARS or len(reference) > MAX_ANSWER_CHARS:
        return Grade(False, parsed=False)
    pred, ref = normalize_answer(prediction), normalize_answer(reference)
    if not pred:
        return Grade(False, parsed=False)
    if pred == ref:
        return Grade(True, parsed=True)
    a, b = parse_number(pred), parse_number(ref)
    if a is not None and b is not None:
        return Grade(numbers_equal(a, b), parsed=True)
    if (a is None and is_numeral(pred)) or (b is None and is_numeral(ref)):  # 1e30000000, 1/0: beyond the caps
        return Grade(False, parsed=a is not None)
    return _math_verify_grade(_latex_numeral(pred), _latex_numeral(ref))


def _latex_numeral(answer: str) -> str:
    """'6.02e23' as '6.02\\times10^{23}' (LaTeX would read 'e' as Euler's number); anything else unchanged."""
    mantissa, _, exponent = answer.partition("e") if is_numeral(answer) else (answer, "", "")
    return f"{mantissa}\\times10^{{{exponent}}}" if exponent else answer


def answers_match(prediction: str | None, reference) -> bool:
    """Whether a predicted answer equals a reference (see `grade_answer`)."""
    return grade_answer(prediction, reference).correct


def _missing(reference) -> bool:
    return reference is None or not str(reference).strip()


def require_references(references, what: str = "the dataset") -> None:
    """One line naming the first row whose reference answer is null or empty (GRPO checks this before training)."""
    for index, reference in enumerate(references):
        if _missing(reference):
            raise WeMaskError(
                f"{what} row {index + 1} has no reference answer ({reference!r}), which the math reward "
                "grades against: fill it in or drop the row"
            )


def grade_completions(completions, references) -> list[Grade]:
    """One Grade per completion (text or conversation) against its reference; a missing reference is an error."""
    references = list(references)
    if len(references) != len(completions):
        raise ValueError(f"{len(completions)} completions for {len(references)} reference answers")
    require_references(references, "the math reward's batch:")
    return [grade_answer(extract_answer(completion_text(c)), ref) for c, ref in zip(completions, references)]


def math_reward(completions, answer=None, log_metric=None, solution=None, **kwargs) -> list[float]:
    """1.0 for each completion whose final answer matches the reference in the ``answer`` column (or TRL's
    ``solution``), else 0.0. Under TRL, the number of unparseable answers in the batch is logged as
    `rewards/math_reward/unparseable`."""
    answer = answer if answer is not None else solution
    if answer is None:
        raise WeMaskError(
            "the math reward needs an 'answer' (or TRL's 'solution') column in the dataset "
            "(GSM8K layout: question, answer ending in '#### N')"
        )
    grades = grade_completions(completions, answer)
    if log_metric is not None:
        log_metric(UNPARSEABLE_METRIC, float(sum(not g.parsed for g in grades)))
    return [1.0 if g.correct else 0.0 for g in grades]
