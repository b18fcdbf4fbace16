"""`wemask eval`: its help here, its flags in cli/eval_flags.py (built when the command runs: the help of its flags
names the registered eval tasks, plugins' included, so `wemask --help` does not load them)."""

from __future__ import annotations

import typer

from ..ranks import main_only

EVAL_HELP = """Evaluate one model at several mask rates in one process: table, metrics.json, results.csv, examples.jsonl, curve.png.

    The model is loaded once; each setting is applied and removed. Tasks: perplexity (every token scored once in \
rolling windows: perplexity, word_perplexity, byte_perplexity, bits_per_byte), choice (log-likelihood of each \
option: accuracy, and accuracy_norm per character of the option, lm-eval's acc/acc_norm), math (generate, then the \
GRPO math reward's grader: accuracy, and how many answers were unparseable), refusal (share of completions whose \
first 300 characters match a refusal phrase; the list is wemask_cli.eval.tasks.refusal.REFUSAL_PATTERNS).

    Spread: the standard error over examples (n/a for one), or with --seeds N (math, refusal) the std across sampled \
seeds. Compare runs with `wemask report DIR...`.
    """


def summaries() -> dict[str, str]:
    return {"eval": EVAL_HELP}


def register(app: typer.Typer, name: str) -> None:
    """`wemask eval` (imports its flags, which load the eval-task plugins)."""
    from .eval_flags import eval_

    app.command(name, help=EVAL_HELP)(main_only(eval_))  # under a launcher: rank 0 works, the others wait
