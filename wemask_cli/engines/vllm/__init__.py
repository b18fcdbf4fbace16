"""WeMask in vLLM: with wemask_cli/compat/vllm.py (vLLM's internals), the only code of wemask that imports vllm
(lazily, inside functions).

    from wemask_cli.engines.vllm import install_wemask
    llm.apply_model(lambda model: install_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=11)))

`install_wemask(model, config)` works on any loaded vLLM model object (torch only); the general plugin
(`plugin.register`, entry point group vllm.general_plugins) installs a run folder's saved mask in the vLLM
processes that serve it (inert otherwise); `memory` sizes vLLM's memory for the job; `engine.VllmEngine` runs
generation and prompt log-probabilities for `wemask infer/eval --engine vllm`.
"""

from .mask import (
    SUPPORTED_ARCHITECTURES,
    InstalledMask,
    VllmEngineError,
    current_mask,
    install_wemask,
    remove_wemask,
)
from .support import install_from_folder, saved_wemask_for_vllm

__all__ = [
    "InstalledMask", "SUPPORTED_ARCHITECTURES", "VllmEngineError", "current_mask", "install_from_folder",
    "install_wemask", "remove_wemask", "saved_wemask_for_vllm",
]  # fmt: skip
