"""Reward specs (`NAME[:WEIGHT]`, `file.py:function`, `module:function`): parsing, loading and checking for TRL."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from wemask_cli.rewards.extract import format_reward
from wemask_cli.rewards.grader import math_reward
from wemask_cli.runtime.errors import WeMaskError

BUILTIN_REWARDS: dict[str, Callable] = {"math": math_reward, "format": format_reward}
# TRL's reward names (trl/scripts/grpo.py's registry, from trl.rewards), so `--reward_funcs accuracy_reward` runs as in
# TRL; get_soft_overlong_punishment with the values TRL's script uses. The TRL ones read a `solution` column.
TRL_REWARDS = {"accuracy_reward": None, "reasoning_accuracy_reward": None, "think_format_reward": None,
               "get_soft_overlong_punishment": {"max_completion_len": 1280, "soft_punish_cache": 256}}  # fmt: skip


_WEIGHT_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")  # digits only: 'nan' or 'inf' is a name


def parse_reward_spec(spec: str) -> tuple[str, float]:
    """Split "target[:weight]" (target: builtin name, file.py:function or module:function) into (target, weight).

    A weight is written with digits (0.5, 2, 1e-1): a function named `nan` or `inf` is a name, not a weight."""
    spec = spec.strip()
    parts = spec.split(":")
    if not spec or len(parts) > 3 or not all(parts):
        raise WeMaskError(
            f"bad reward '{spec}': use NAME[:WEIGHT], FILE.py:FUNCTION[:WEIGHT] or MODULE:FUNCTION[:WEIGHT]"
        )
    if len(parts) == 1:
        return spec, 1.0
    if len(parts) == 2 and parts[0] not in (*BUILTIN_REWARDS, *TRL_REWARDS) and not _WEIGHT_RE.match(parts[1].strip()):
        return spec, 1.0
    target, raw_weight = ":".join(parts[:-1]), parts[-1]
    if not _WEIGHT_RE.match(raw_weight.strip()):
        raise WeMaskError(
            f"bad reward weight '{raw_weight}' in '{spec}': the weight must be a number, e.g. {target}:0.5"
        )
    weight = float(raw_weight)
    if not math.isfinite(weight) or weight < 0:
        raise WeMaskError(f"bad reward weight '{raw_weight}' in '{spec}': the weight must be a finite number >= 0")
    return target, weight


def _one_line(exc: Exception) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _load_object(target: str):
    location, _, name = target.rpartition(":")
    if location.endswith(".py") or "/" in location or "\\" in location:
        path = Path(location).expanduser()
        if not path.is_file():
            raise WeMaskError(
                f"reward file '{location}' does not exist: give the path of a .py file, e.g. my_rewards.py:my_reward"
            )
        module_name = "wemask_reward_" + re.sub(r"\W", "_", str(path.resolve()))
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise WeMaskError(
                f"reward file '{location}' failed to load: {_one_line(exc)}; fix the error in that file"
            ) from exc
    else:
        try:
            module = importlib.import_module(location)
        except Exception as exc:
            raise WeMaskError(
                f"reward module '{location}' cannot be imported ({_one_line(exc)}); check it is installed "
                "or on PYTHONPATH, or give a file path like path/to/rewards.py:function"
            ) from exc
    if not hasattr(module, name):
        raise WeMaskError(
            f"reward function '{name}' not found in '{location}': define it there or fix the name in '{target}'"
        )
    return getattr(module, name)


def trl_reward(name: str) -> Callable:
    """One of TRL's rewards by its name in TRL's GRPO script (TRL_REWARDS). They read conversational completions
    only; plain-text prompts give plain-text completions, which are handed over as one assistant message each."""
    from functools import wraps

    import trl.rewards

    func, factory_args = getattr(trl.rewards, name), TRL_REWARDS[name]
    func = func(**factory_args) if factory_args is not None else func

    @wraps(func)
    def reward(completions, **kwargs):
        as_messages = [[{"role": "assistant", "content": c}] if isinstance(c, str) else c for c in completions]
        return func(as_messages, **kwargs)

    return reward


def load_reward(target: str) -> Callable:
    """The reward function for a builtin name, one of TRL's, ``file.py:function``, ``module:function`` or TRL's dotted
    ``module.function``, checked for TRL."""
    if target in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[target]
    if target in TRL_REWARDS:
        return trl_reward(target)
    if ":" not in target and "." in target and not target.endswith(".py"):
        target = ":".join(target.rsplit(".", 1))  # TRL's 'my_lib.rewards.custom_reward'
    if ":" not in target:
        raise WeMaskError(
            f"unknown reward '{target}': use a builtin ({', '.join(BUILTIN_REWARDS)}), one of TRL's "
            f"({', '.join(TRL_REWARDS)}), FILE.py:FUNCTION or MODULE:FUNCTION"
        )
    func = _load_object(target)
    if not callable(func):
        raise WeMaskError(f"reward '{target}' is a {type(func).__name__}, not a function: point it at a function")
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        raise WeMaskError(
            f"reward '{target}' has no readable signature: wrap it in a def f(completions, **kwargs) function"
        ) from None
    takes_completions = any(
        p.name == "completions" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params
    )
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
    if not (takes_completions and takes_kwargs):
        raise WeMaskError(
            f"reward '{target}' has the wrong signature: it must accept `completions` and `**kwargs`, as in "
            f"def {getattr(func, '__name__', 'f')}(completions, **kwargs) (TRL passes prompts, completions, "
            "completion_ids, trainer_state and dataset columns as keywords)"
        )
    return func


def load_rewards(specs: list[str]) -> tuple[list[Callable], list[float]]:
    """Reward functions and weights for a list of reward specs; custom ones wrapped by `checked_reward`."""
    funcs, weights = [], []
    for spec in specs:
        target, weight = parse_reward_spec(spec)
        func = load_reward(target)
        funcs.append(func if target in BUILTIN_REWARDS or target in TRL_REWARDS else checked_reward(func, target, alone=len(specs) == 1))
        weights.append(weight)
    return funcs, weights


def checked_reward(func: Callable, target: str, *, alone: bool) -> Callable:
    """`func` as TRL calls it, with its answers checked: one number (or None: not applicable) per completion.

    A wrong count, a string, None instead of a list, or an infinity is one line; no finite value at all is one
    line when it is the only reward (the trainer would learn nothing), a warning otherwise. An exception raised inside
    the user's function keeps its traceback, preceded by a line saying whose code raised it."""
    from functools import wraps

    from wemask_cli.runtime.progress import warn

    warned = []

    def check(values, completions):
        values = _check_values(values, target, len(completions) if completions is not None else None)
        if all(v is None or math.isnan(v) for v in values):
            message = (f"reward '{target}' returned no number for any of the {len(values)} completions (all NaN or "
                       "None), so the trainer has nothing to learn from")
            if alone:
                raise WeMaskError(message + ": check what it computes")
            if not warned:
                warned.append(True)
                warn(message + " in this batch")
        return values

    def theirs():
        warn(f"the error below was raised inside your reward function '{target}', not by wemask: fix it there")

    if inspect.iscoroutinefunction(func):  # TRL also accepts async rewards

        @wraps(func)
        async def async_reward(*args, completions=None, **kwargs):
            try:
                values = await func(*args, completions=completions, **kwargs)
            except Exception as err:
                if not isinstance(err, WeMaskError):
                    theirs()
                raise
            return check(values, completions)

        return async_reward

    @wraps(func)
    def reward(*args, completions=None, **kwargs):
        try:
            values = func(*args, completions=completions, **kwargs)
        except Exception as err:
            if not isinstance(err, WeMaskError):
                theirs()
            raise
        return check(values, completions)

    return reward


def _check_values(values, target: str, expected: int | None) -> list:
    """The reward's answer as a list of floats or None, or one line saying what is wrong with it."""
    if hasattr(values, "tolist"):  # numpy arrays, tensors
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise WeMaskError(
            f"reward '{target}' returned {type(values).__name__} ({str(values)[:40]!r}), not a list with one number per completion"
        )
    if expected is not None and len(values) != expected:
        raise WeMaskError(f"reward '{target}' returned {len(values)} values for {expected} completions: return one number per completion")
    out = []
    for i, value in enumerate(values):
        if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, (int, float))):
            raise WeMaskError(
                f"reward '{target}' returned a {type(value).__name__} ({str(value)[:40]!r}) for completion {i}: "
                "rewards must be numbers (or None for 'not applicable')"
            )
        if value is not None and math.isinf(value):
            raise WeMaskError(f"reward '{target}' returned {value} for completion {i}: rewards must be finite")
        out.append(None if value is None else float(value))
    return out
