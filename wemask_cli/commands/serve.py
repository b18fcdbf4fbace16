"""`wemask vllm-serve`: the server of the engine that generates a trainer's rollouts (engines.base.Rollouts.serve)."""

from __future__ import annotations

from wemask_cli.engines.base import ServeRequest, rollout_engine
from wemask_cli.runtime.errors import WeMaskError

__all__ = ["ServeRequest", "run_serve"]


def run_serve(request: ServeRequest) -> None:
    """Check what needs no model, then start the server (it replaces this process)."""
    engine = rollout_engine()
    if engine is None:
        raise WeMaskError("wemask vllm-serve: no installed engine serves rollouts: pip install wemask-cli[vllm]")
    engine.rollouts().serve(request)
