"""Answer extraction, answer grading and GRPO reward functions (shared by training and evaluation)."""

from .extract import completion_text, extract_answer, format_reward
from .grader import (
    Grade,
    answers_match,
    grade_answer,
    grade_completions,
    math_reward,
    require_references,
)
from .loading import (
    BUILTIN_REWARDS,
    checked_reward,
    load_reward,
    load_rewards,
    parse_reward_spec,
)
from .numbers import normalize_answer, parse_number

__all__ = [
    "BUILTIN_REWARDS", "Grade", "answers_match", "checked_reward", "completion_text", "extract_answer",
    "format_reward", "grade_answer", "grade_completions", "load_reward", "load_rewards", "math_reward",
    "normalize_answer", "parse_number", "parse_reward_spec", "require_references",
]
