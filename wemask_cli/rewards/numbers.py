"""Normalising an answer string, and reading a numeric answer as an exact rational, with bounded work.

Numbers are exact: integers, decimals, fractions, percentages and scientific notation are rationals
(1000001 != 1000000 at any size). The one tolerance: a decimal against a value with no finite decimal expansion
(1/3, 2/7, either side) matches within a relative 1e-6, since such a decimal can only be a rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from wemask_cli.rewards.extract import MINUS_SIGNS

MAX_ANSWER_CHARS = 1000  # a longer extracted answer is not read (counted as unparseable)
MAX_DIGITS = 1000  # digits of one numeral
MAX_EXPONENT = 10_000  # |exponent| in scientific notation: 1e10000 is a 10,001-digit integer, built in microseconds
RELATIVE_TOLERANCE = Fraction(1, 10**6)

_UNITS = r"%|cm|mm|km|kg|mg|ml|m|g|l|s|h|min|lb|lbs|oz|ft|in|mph|kph"
_DECIMAL = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
_NUMBER_RE = re.compile(rf"({_DECIMAL})(?:/({_DECIMAL}))?", re.IGNORECASE)
_TIMES_TEN_RE = re.compile(r"(\d)\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?$")
_POWER_OF_TEN_RE = re.compile(r"10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?")
_MIXED_RE = re.compile(r"^(-?)(\d{1,100})\s*\\[dt]?frac\s*\{(\d{1,100})\}\s*\{(\d{1,100})\}$")
_DROPPED = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\displaystyle", "^\\circ", "^{\\circ}", "\\%", "%", "\\$", "$")


@dataclass(frozen=True)
class Number:
    """An exact value and whether it was written as a decimal (a point or an exponent) rather than an integer/ratio."""

    value: Fraction
    decimal: bool


def _frac_to_slash(match: re.Match) -> str:
    parts = [p if re.fullmatch(r"-?[\w.]+", p) else f"({p})" for p in (match.group(1), match.group(2))]
    return f"{parts[0]}/{parts[1]}"


def _mixed_number(match: re.Match) -> str:
    sign, whole, num, den = match.groups()
    return f"{sign}{int(whole) * int(den) + int(num)}/{den}"


def _canonical_number(s: str) -> str:
    """A plain decimal without trailing zeros ('3.50' -> '3.5', '-0' -> '0'); exponents are left as they are."""
    if "e" in s.lower() or _digit_count(s) > MAX_DIGITS:
        return s.lower()
    text = format(Decimal(s).normalize(), "f")
    return "0" if text in ("-0", "0") else text


def normalize_answer(s: str) -> str:
    """Canonical form of an answer string: no whitespace, units, dollars, LaTeX decoration or trailing zeros."""
    s = (s or "").strip().translate(MINUS_SIGNS)
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r" \1", s)
    for token in _DROPPED:
        s = s.replace(token, "")
    s = s.replace("{,}", ",")
    s = re.sub(r"\\[dt]?frac\s*(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = _MIXED_RE.sub(_mixed_number, s.strip())
    previous = None
    while previous != s:
        previous = s
        s = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", _frac_to_slash, s)
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"^[A-Za-z]\s*=\s*", "", s)
    s = _TIMES_TEN_RE.sub(r"\1e\2", s)
    s = _POWER_OF_TEN_RE.sub(r"1e\1", s) if _POWER_OF_TEN_RE.fullmatch(s) else s
    unit = re.fullmatch(rf"({_DECIMAL}(?:\s*/\s*\d+)?)(?:\s+[A-Za-z][A-Za-z .'-]*|\s*(?:{_UNITS})\.?)", s, re.IGNORECASE)
    if unit:
        s = unit.group(1)
    s = re.sub(r"\s+", "", s)
    number = _NUMBER_RE.fullmatch(s)
    if number is None:
        return s
    num, den = number.groups()
    return _canonical_number(num) + (f"/{_canonical_number(den)}" if den else "")


def _digit_count(literal: str) -> int:
    return sum(ch.isdigit() for ch in literal.lower().partition("e")[0])


def _literal_value(literal: str) -> Fraction | None:
    """The exact value of one decimal literal, None when it has too many digits or too large an exponent."""
    mantissa, _, exponent = literal.lower().partition("e")
    if _digit_count(mantissa) > MAX_DIGITS or len(exponent) > 7 or (exponent and abs(int(exponent)) > MAX_EXPONENT):
        return None
    return Fraction(mantissa) * Fraction(10) ** int(exponent or 0)


def is_numeral(s: str) -> bool:
    """Whether a normalised answer is written as a number ('12', '-3.5', '6.02e23', '3/4'), whatever its size."""
    return _NUMBER_RE.fullmatch(s) is not None


def parse_number(s: str) -> Number | None:
    """A normalised answer as an exact `Number`; None when it is not a number, is 'x/0', or exceeds the caps."""
    match = _NUMBER_RE.fullmatch(s)
    if match is None:
        return None
    num, den = (_literal_value(g) if g else None for g in match.groups())
    if num is None or (match.group(2) and den is None):
        return None
    try:
        value = num / den if match.group(2) else num
    except ZeroDivisionError:
        return None
    return Number(value, bool(re.search(r"[.eE]", s)))


def _terminates(value: Fraction) -> bool:
    """Whether the value has a finite decimal expansion (its denominator has no prime factor but 2 and 5)."""
    den = value.denominator
    return pow(10, den.bit_length(), den) == 0 if den > 1 else True


def numbers_equal(a: Number, b: Number) -> bool:
    """Exact equality; within RELATIVE_TOLERANCE only for a decimal against a value with no finite decimal."""
    if a.value == b.value:
        return True
    rounded = (a.decimal and not _terminates(b.value)) or (b.decimal and not _terminates(a.value))
    return rounded and abs(a.value - b.value) <= RELATIVE_TOLERANCE * max(abs(a.value), abs(b.value))
