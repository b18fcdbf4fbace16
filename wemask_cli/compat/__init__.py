"""Layer 0, other libraries' internals (ranks: tests/test_layers.py).

Every touch of another library's private API, one module per library (accelerate.py, bitsandbytes.py,
datasets.py, huggingface_hub.py, lm_eval.py, transformers.py, argparse.py for the standard library, vllm.py, which
also holds TRL's vLLM glue: `trl.generation.vllm_generation.LLM`, GRPOTrainer's `vllm_generation.llm`; the rest of
TRL is read through its public config dataclasses, train/trl_flags.py). notices.py holds the only warning filters,
around a command.

Each module declares `VERIFIED`, {library: (oldest, newest release series)} its internals were verified on
(verified.py gathers them; runtime/tested.py warns in one line, once per command, about an installed release
outside them, as about one outside the tested environments), and reaches the private names only through `require`,
which checks at run time that the name exists (and, for a callable, takes the expected parameters). A library
release that moved an internal is then one line naming the library, its version and the fix, never a silent
no-op or a wrong result. Imports nothing heavy: each library module imports its library itself."""

from __future__ import annotations

import inspect

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.versions import library_versions, range_text


class CompatError(WeMaskError):
    """An internal of another library that wemask relies on is missing or changed in the installed release."""


MISSING = object()


def require(library: str, owner, attr: str, *, params: tuple[str, ...] = (), verified: dict | None = None,
            kind: type | None = None) -> object:
    """`owner.attr` (owner a module, class or object of `library`; "python" for the standard library), checked to
    exist, to be a `kind` when given, and, for a callable, to accept the parameters `params`; otherwise one
    CompatError naming the installed and the verified versions (`verified`: the calling module's VERIFIED). An attribute that exists with the value None
    passes unless `kind` says otherwise."""
    value = getattr(owner, attr, MISSING)
    where = f"{qualified_name(owner)}.{attr}"
    if value is MISSING:
        raise incompatible(library, f"{where} no longer exists", verified)
    if kind is not None and not isinstance(value, kind):
        raise incompatible(library, f"{where} is no longer a {kind.__name__}", verified)
    if value is None and params:
        raise incompatible(library, f"{where} no longer exists", verified)
    if params:
        try:
            accepted = inspect.signature(value).parameters
        except (TypeError, ValueError):
            accepted = {}
        missing = [name for name in params if name not in accepted]
        if missing:
            raise incompatible(library, f"{where} no longer takes {', '.join(missing)}", verified)
    return value


def qualified_name(owner) -> str:
    """'huggingface_hub.constants' for a module, 'accelerate.state.AcceleratorState' for a class or its instance."""
    if inspect.ismodule(owner):
        return owner.__name__
    cls = owner if inspect.isclass(owner) else type(owner)
    return f"{cls.__module__}.{cls.__qualname__}"


def incompatible(library: str, what: str, verified: dict | None) -> CompatError:
    """The one-line error for an internal that moved: the library's installed version and what to install instead."""
    installed = library_versions((library,))[library] or "not installed"
    span = (verified or {}).get(library)
    known = f" (wemask was verified on {library} {range_text(*span)})" if span else ""
    return CompatError(
        f"{library} {installed}: {what}{known}; install a verified {library} release, or report this to wemask"
    )
