"""lm-evaluation-harness internals (verified on lm-eval 0.4.13), and the shape of what wemask calls.

`simple_evaluate` records the git commit of the current directory by running `git describe --always` with git's
stderr left on the terminal: outside a git checkout every eval prints `fatal: not a git repository`. `quiet_git_hash`
swaps the evaluator's `get_git_commit_hash` for one that asks git the same with its stderr discarded.

eval/tasks/lm_eval.py calls `TaskManager(include_path=, include_defaults=)`, `HFLM(pretrained=, tokenizer=,
batch_size=)` and `simple_evaluate(...)` with the parameters below, and reads its output's `results` ("metric,filter"
keys with "metric_stderr,filter"), `samples` (doc_id, arguments, target, filtered_resps, metrics), `n-samples` and
`configs`: `check()` checks the calls, `check_output()` the output (at run time too, so a release that reshaped it
is one line, not a KeyError).

An HFLM built around a model instance is one process to lm-eval (rank 0 of 1: every process of a launched run builds
every request), and `simple_evaluate` returns its output only where that rank and LOCAL_RANK are 0 (None elsewhere).
The evaluator scores each request type with `getattr(lm, TYPE)(requests)`, TYPE one of REQUEST_TYPES; HFLM's take
`(requests, disable_tqdm=)` and answer in the requests' order.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from functools import partial

from wemask_cli.compat import require

LIBRARY = "lm-eval"
SIMPLE_EVALUATE = ("model", "tasks", "task_manager", "limit", "num_fewshot", "apply_chat_template", "fewshot_as_multiturn",
                   "log_samples", "fewshot_random_seed", "bootstrap_iters")
HFLM_PARAMS = ("pretrained", "tokenizer", "batch_size")
TASK_MANAGER = ("include_path", "include_defaults")
REQUEST_TYPES = ("loglikelihood", "loglikelihood_rolling", "generate_until")  # an LM's request methods
REQUEST_PARAMS = ("requests", "disable_tqdm")
OUTPUT_KEYS = ("results", "samples", "n-samples", "configs")
SAMPLE_KEYS = ("doc_id", "arguments", "target", "filtered_resps", "metrics")
VERIFIED = {LIBRARY: ("0.4", "0.4")}  # the release series this module was verified on


def git_commit_hash() -> str | None:
    """The current directory's git commit (lm-eval's `git_hash`), None outside a checkout, git's complaints discarded."""
    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()  # noqa: S607
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


@contextlib.contextmanager
def quiet_git_hash():
    """While lm-eval evaluates: its git lookup without `fatal: not a git repository` on the terminal."""
    from lm_eval import evaluator

    original = require(LIBRARY, evaluator, "get_git_commit_hash", verified=VERIFIED)
    evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = original


def route_requests(lm, through: Callable) -> None:
    """Each of `lm`'s request methods (REQUEST_TYPES) called as `through(method, requests, disable_tqdm=)` from then on."""
    for name in REQUEST_TYPES:
        method = require(LIBRARY, lm, name, params=REQUEST_PARAMS, verified=VERIFIED)
        setattr(lm, name, partial(through, method))


def check() -> None:
    """The calls eval/tasks/lm_eval.py makes take the parameters it passes (the canary in tests/test_compat.py)."""
    import lm_eval
    from lm_eval import evaluator
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    require(LIBRARY, evaluator, "get_git_commit_hash", verified=VERIFIED)
    require(LIBRARY, lm_eval, "simple_evaluate", params=SIMPLE_EVALUATE, verified=VERIFIED)
    require(LIBRARY, HFLM, "__init__", params=HFLM_PARAMS, verified=VERIFIED)
    for name in REQUEST_TYPES:
        require(LIBRARY, HFLM, name, params=REQUEST_PARAMS, verified=VERIFIED)
    require(LIBRARY, TaskManager, "__init__", params=TASK_MANAGER, verified=VERIFIED)
    require(LIBRARY, TaskManager, "all_tasks", verified=VERIFIED)


def check_output(out: dict, tasks: list[str]) -> dict:
    """`out`, simple_evaluate's output for `tasks` with log_samples, checked to hold what wemask reads; a CompatError
    naming the first part that is missing."""
    from wemask_cli.compat import incompatible

    missing = [key for key in OUTPUT_KEYS if not isinstance(out.get(key), dict)]
    missing += [f"results[{task!r}]" for task in tasks if not missing and not isinstance(out["results"].get(task), dict)]
    samples = [sample for task in tasks if not missing for sample in out["samples"].get(task, [])[:1]]
    missing += [f"a sample's {key!r}" for sample in samples for key in SAMPLE_KEYS if key not in sample]
    metrics = [key for task in tasks if not missing for key in out["results"][task] if "," in key]
    if not missing and not metrics:
        missing.append("'metric,filter' keys in results")
    if missing:
        raise incompatible(LIBRARY, f"simple_evaluate's output no longer has {', '.join(missing)}", VERIFIED)
    return out
