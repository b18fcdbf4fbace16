"""Engines: where a forward runs. transformers runs WeMask as hooks (wemask_cli.method.mask); vLLM runs the same
mask as a tensor operation on `positions == 0` (wemask_cli.engines.vllm, the only package that imports vllm)."""

ENGINES = ("transformers", "vllm")


def engine_of(model) -> str:
    """The engine a loaded model runs on: an engine object (wemask_cli.engines.vllm.engine.VllmEngine) names
    itself in `engine_name`; anything else is a transformers model."""
    return getattr(model, "engine_name", "transformers")
