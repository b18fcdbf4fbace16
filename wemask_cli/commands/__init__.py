"""Layer 5, commands (ranks: tests/test_layers.py).

One module per command: the work behind `wemask infer`, `locate`, `eval`, `report` and the training commands
(train.py, over the core package train/), rich-free (the CLI renders).

Commands import core modules (models, data, prompts, masking, ...) and the method, never each other.
"""

from wemask_cli.engines.base import DEFAULT_ENGINE  # --engine's default, for the CLI's flags (torch-free)

__all__ = ["DEFAULT_ENGINE", "engine_help"]


def engine_help() -> str:
    """--engine's help, from the engine registry (torch-free; loads the engine plugins)."""
    from wemask_cli.engines.base import engine_help as registered

    return registered()
