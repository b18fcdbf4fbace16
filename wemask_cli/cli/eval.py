"""`wemask eval`: its help here, its flags in cli/eval_flags.py (built when the command runs: the help lists the
registered eval tasks and their flags, plugins' included, so `wemask --help` does not load them). Names no task."""

from __future__ import annotations

import typer

EVAL_SUMMARY = ("Evaluate one model at several mask rates in one run: table, metrics.json, results.csv, "
                "examples.jsonl, curve.png.")


def eval_help() -> str:
    """The command's help: the summary, then every registered task that describes itself, and the spread."""
    from wemask_cli.eval.tasks.registry import accepting, tasks

    described = ", ".join(f"{name} ({cls.description})" for name, cls in tasks().items() if cls.description)
    sampling = ", ".join(accepting(lambda cls: cls.generates))
    return f"""{EVAL_SUMMARY}

    The model is loaded once; each setting is applied and removed. Tasks: {described}.

    Spread: the standard error over examples (n/a for one), or with --seeds N ({sampling}) the std across sampled \
seeds. Compare runs with `wemask report DIR...`.
    """


def summaries() -> dict[str, str]:
    return {"eval": EVAL_SUMMARY}


def register(app: typer.Typer, name: str) -> None:
    """`wemask eval` (imports its flags, which load the eval-task plugins)."""
    from wemask_cli.cli.eval_flags import eval_
    from wemask_cli.cli.launch import launchable

    app.command(name, help=eval_help())(launchable(eval_))  # under a launcher: every process its share of the batches
