"""WeMask in vLLM: with wemask_cli/compat/vllm.py (vLLM's internals), the only code of wemask that imports vllm
(lazily, inside functions).

    from wemask_cli.engines.vllm import install_wemask
    llm.apply_model(partial(install_wemask, config=WeMaskConfig(mask_rate=0.3, me_layer=11)))  # functools.partial:
    # it is pickled to tensor-parallel workers, which a lambda is not

`install_wemask(model, config)` works on any loaded vLLM model object (torch only); the general plugin
(`plugin.register`, entry point group vllm.general_plugins) installs a run folder's saved mask in the vLLM
processes that serve it (inert otherwise); `memory` sizes vLLM's memory for the job; `engine.VllmEngine` runs
generation and prompt log-probabilities for `wemask infer/eval --engine vllm` (the Engine protocol, engines/base.py).
"""

# the public names, imported when first used: importing the package (engine.py, listed by the engine registry for
# `wemask infer --help`) imports no torch
MASK_NAMES = ("InstalledMask", "SUPPORTED_ARCHITECTURES", "VllmEngineError", "current_mask", "install_wemask", "remove_wemask")
SUPPORT_NAMES = ("install_from_folder", "saved_wemask_for_vllm")
__all__ = sorted(MASK_NAMES + SUPPORT_NAMES)


def __getattr__(name: str):
    if name in MASK_NAMES:
        from wemask_cli.engines.vllm import tensor_mask as mask

        return getattr(mask, name)
    if name in SUPPORT_NAMES:
        from wemask_cli.engines.vllm import support

        return getattr(support, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
