"""WeMask in vLLM: with wemask_cli/compat/vllm.py (vLLM's internals), the only code of wemask that imports vllm
(lazily, inside functions).

    from wemask_cli.engines.vllm import install_wemask
    llm.apply_model(lambda model: install_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=11)))

`install_wemask(model, config)` works on any loaded vLLM model object (torch only); the general plugin
(`plugin.register`, entry point group vllm.general_plugins) installs a run folder's saved mask in the vLLM
processes that serve it (inert otherwise); `memory` sizes vLLM's memory for the job; `engine.VllmEngine` runs
generation and prompt log-probabilities for `wemask infer/eval --engine vllm` (the Engine protocol, engines/base.py).
"""

# the public names, imported when first used: importing the package (engine.py, listed by the engine registry for
# `wemask infer --help`) imports no torch
EXPORTS = {
    "InstalledMask": "mask", "SUPPORTED_ARCHITECTURES": "mask", "VllmEngineError": "mask", "current_mask": "mask",
    "install_wemask": "mask", "remove_wemask": "mask", "install_from_folder": "support",
    "saved_wemask_for_vllm": "support",
}  # fmt: skip
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{EXPORTS[name]}", __name__), name)
