"""The vLLM general plugin (entry point group `vllm.general_plugins`): every vLLM process masks like the run.

vLLM calls `register()` in each of its processes (engine, workers, `vllm serve`, `trl vllm-serve`). It wraps
`BaseModelLoader.load_model`, which every default loader (safetensors, pt, dummy, sharded...) runs. Before the
weights load, the wrapper reads the WeMask saved in the model folder (`model=` / `vllm serve FOLDER`) and refuses
in one line what vLLM cannot run; after they load, it installs the mask, before vLLM compiles or captures graphs.

A model that vLLM will compile is *armed* (masked forward on every layer, identity values) when its folder carries
an active mask, or when WEMASK_VLLM_ARM=1, so that `install_wemask` can change the mask later. An armed
model adds a "wemask" entry to vllm_config.additional_config, which is part of vLLM's compile-cache key: a graph
compiled without the mask is never reused for a masked model, nor the other way round.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sys

from .mask import SUPPORTED_ARCHITECTURES, VllmEngineError, arm, compiles, install_wemask, unsupported_architecture
from .support import saved_wemask_for_vllm, version_warning

ARM_VARIABLE = "WEMASK_VLLM_ARM"
OFF_VARIABLE = "WEMASK_VLLM_PLUGIN"  # "0": the plugin does nothing in this process
logger = logging.getLogger("wemask.vllm")


def register() -> None:
    """Wrap vLLM's model loader once per process (vLLM may call plugins several times); WEMASK_VLLM_PLUGIN=0 opts out."""
    if os.environ.get(OFF_VARIABLE) == "0":
        return
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    if getattr(BaseModelLoader.load_model, "wemask_wrapped", False):
        return
    BaseModelLoader.load_model = masked_load_model(BaseModelLoader.load_model)


def masked_load_model(original):
    """`BaseModelLoader.load_model` that checks the folder's mask first and installs it after the weights load."""

    @functools.wraps(original)
    def load_model(self, vllm_config, model_config, *args, **kwargs):
        config = saved_wemask_for_vllm(model_config.model)  # a VllmEngineError (one line) before any weight loads
        armed = (config is not None and config.active) or os.environ.get(ARM_VARIABLE) == "1"
        architectures = list(getattr(model_config, "architectures", None) or [])
        if armed and not set(architectures) & set(SUPPORTED_ARCHITECTURES):
            if config is not None and config.active:
                raise VllmEngineError(unsupported_architecture(architectures[0] if architectures else "(none)"))
            armed = False  # WEMASK_VLLM_ARM on a model the mask does not cover: leave it plain
        if armed:
            announce(vllm_config, config)
        model = original(self, vllm_config, model_config, *args, **kwargs)
        if armed and compiles(model):
            arm(model)  # before vLLM compiles: the graph then carries the mask's code on every layer
        if config is not None and config.active:
            install_wemask(model, config)
        return model

    load_model.wemask_wrapped = True
    return load_model


def announce(vllm_config, config) -> None:
    """Say what is masked (and an unverified vLLM version); key vLLM's compile cache on the mask's code."""
    import vllm

    warning = version_warning(vllm.__version__)
    if warning:
        print(warning, file=sys.stderr)
    what = config.describe() if config is not None and config.active else f"armed by {ARM_VARIABLE}=1, no mask yet"
    logger.warning("wemask: WeMask in vLLM: %s", what)
    if isinstance(vllm_config.additional_config, dict):
        vllm_config.additional_config["wemask"] = mask_code_fingerprint()


def mask_code_fingerprint() -> str:
    """A hash of the masked forward's source file: the compiled graph depends on it, not on the dims (a buffer)."""
    from importlib.resources import files

    source = files(__package__).joinpath("mask.py").read_bytes()  # the installed module's own file (wheel or checkout)
    return hashlib.sha256(source).hexdigest()[:16]
