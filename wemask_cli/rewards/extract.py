"""Finding the final answer in a completion, and the `format` reward. Every scan is linear in the text's length."""

from __future__ import annotations

import re

MINUS_SIGNS = str.maketrans({"\u2212": "-", "\uff0d": "-"})  # Unicode minus, full-width hyphen-minus

NUMBER = r"(?:(?<![\w)])-)?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+(?!\w))?"
_LAST_RE = re.compile(rf"-?\\[dt]?frac\s*\{{[^{{}}]*\}}\s*\{{[^{{}}]*\}}|(?:{NUMBER})(?:\s*/\s*\d+)?")
_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_PHRASE_RE = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*(?:is)?)\s*:?[ \t]*([^\n]*)", re.IGNORECASE)
_FORMAT_PHRASE_RE = re.compile(
    r"(?:^|[.!?\n])[^.!?\n]*?\b(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*:)\s*:?\s*\\?\$?\s*"
    rf"(?:{NUMBER})(?:/\d+)?[ \t]*\$?(?:[ \t]*[A-Za-z%]+){{0,2}}[ \t]*\.?$",
    re.IGNORECASE,
)
_BRACES_RE = re.compile(r"\\boxed\s*\{|[{}]")
LAST_NUMBER_WINDOW = 4000  # longer than any answer the grader reads (numbers.MAX_ANSWER_CHARS)
FORMAT_WINDOW = 2000  # the format phrase is looked for in the text's last characters only (it must end the text)


def boxed_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the contents of every balanced ``\\boxed{...}``, in order of their opening: one pass."""
    first = text.find("\\boxed")
    if first < 0:
        return []
    found, stack = [], []  # braces before the first \boxed cannot change which \boxed{...} are balanced
    for match in _BRACES_RE.finditer(text, first):
        token = match.group()
        if token == "}":
            if stack:
                start = stack.pop()
                if start is not None:
                    found.append((start, match.start()))
        else:
            stack.append(match.end() if token != "{" else None)
    found.sort()
    return found


def extract_answer(text: str) -> str | None:
    """Final answer: the last ``#### N``, last ``\\boxed{}``, "the answer is X", else the last number or fraction."""
    if not text:
        return None
    text = text.translate(MINUS_SIGNS)
    hashes = [answer for m in _HASH_RE.finditer(text) if (answer := m.group(1).strip())]
    if hashes:
        return hashes[-1]
    boxed = boxed_spans(text)
    if boxed:
        start, end = boxed[-1]
        return text[start:end].strip()
    phrases = [m.group(1) for m in _PHRASE_RE.finditer(text)]
    if phrases:
        answer = re.split(r"\.(?:\s|$)", phrases[-1], maxsplit=1)[0].strip().rstrip(".").strip()
        if answer:
            return answer
    return _last_number(text)


def _last_number(text: str) -> str | None:
    """The last number or fraction, looked for only in the LAST_NUMBER_WINDOW characters before the last digit."""
    last_digit = max(text.rfind(digit) for digit in "0123456789")
    if last_digit < 0:
        return None
    numbers = _LAST_RE.findall(text, max(0, last_digit - LAST_NUMBER_WINDOW), len(text))
    return numbers[-1] if numbers else None


def completion_text(completion) -> str:
    """The text of a completion: a string, or the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    content = completion[-1].get("content", "") if completion else ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def format_reward(completions, **kwargs) -> list[float]:
    """1.0 for each completion that ends with a marked final answer (``#### N``, ``\\boxed{}``, "The answer is N.")."""
    rewards = []
    for completion in completions:
        text = completion_text(completion).rstrip().translate(MINUS_SIGNS)
        last_line = text.rsplit("\n", 1)[-1]
        boxed = boxed_spans(text)
        ok = (
            bool(re.fullmatch(r"\s*####\s*\S.*", last_line))
            or bool(boxed and not re.sub(r"[\s$.\\\])]", "", text[boxed[-1][1] + 1:]))
            or bool(_FORMAT_PHRASE_RE.search(text[-FORMAT_WINDOW:]))
        )
        rewards.append(1.0 if ok else 0.0)
    return rewards
