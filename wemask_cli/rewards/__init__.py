"""Layer 2, core (ranks: tests/test_layers.py).

Answer extraction, answer grading and GRPO reward functions (shared by training and evaluation)."""

from wemask_cli.rewards.extract import completion_text, extract_answer, format_reward
from wemask_cli.rewards.grader import Grade, answers_match, grade_answer, grade_completions, math_reward, require_references
from wemask_cli.rewards.loading import BUILTIN_REWARDS, checked_reward, load_reward, load_rewards, parse_reward_spec
from wemask_cli.rewards.numbers import normalize_answer, parse_number

__all__ = [
    "BUILTIN_REWARDS", "Grade", "answers_match", "checked_reward", "completion_text", "extract_answer",
    "format_reward", "grade_answer", "grade_completions", "load_reward", "load_rewards", "math_reward",
    "normalize_answer", "parse_number", "parse_reward_spec", "require_references",
]
