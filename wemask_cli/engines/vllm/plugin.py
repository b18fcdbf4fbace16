"""The vLLM general plugin (entry point group `vllm.general_plugins`): vLLM processes that serve a masked run folder
mask like the run.

vLLM calls `register()` in each of its processes (engine, workers, `vllm serve`, `trl vllm-serve`) without a `try`,
so `register()` never raises, and it changes nothing unless this process needs WeMask: wemask itself starts the
engine (WEMASK_VLLM_ARM=1, inherited by vLLM's own processes), the command line names a folder that carries
wemask files (`vllm serve RUN_FOLDER`), or WEMASK_VLLM_PLUGIN=1. A `wemask vllm-serve` server names its mask in
WEMASK_VLLM_MASK (server.py), which wins over the folder's. WEMASK_VLLM_PLUGIN=0 turns it off.

Active, it wraps the `load_model` of every vLLM model loader (compat.vllm.wrap_model_loaders: the base class and
the loaders that override it). Before the weights load, the wrapper reads the WeMask saved in the model folder and
refuses in one line what vLLM cannot run (and, serving a masked folder, weights holding NaN or infinity); after
they load, it installs the mask, before vLLM compiles or captures
graphs. A model that vLLM will compile is *armed* (masked forward on every layer, identity values) when its folder
carries an active mask, or when WEMASK_VLLM_ARM=1, so that `install_wemask` can change the mask later. An armed
model adds a "wemask" entry to vllm_config.additional_config, part of vLLM's compile-cache key: a graph compiled
without the mask is never reused for a masked model, nor the other way round.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sys
import threading
from pathlib import Path

ARM_VARIABLE = "WEMASK_VLLM_ARM"
PLUGIN_VARIABLE = "WEMASK_VLLM_PLUGIN"  # "0": never active in this process; "1": always
MASK_VARIABLE = "WEMASK_VLLM_MASK"  # `wemask vllm-serve`'s mask, a WeMaskConfig as JSON (server.py)
WEMASK_FILES = ("interventions.json", "wemask_config.json")
logger = logging.getLogger("wemask.vllm")
_loading = threading.local()  # inside a wrapped load_model (a loader calling its base class's: wrap once)


def register() -> None:
    """vLLM's entry point: activate the plugin when this process needs it (see module doc). Never raises."""
    try:
        if needed():
            activate()
    except Exception as err:  # noqa: BLE001 (vLLM calls plugins without a try: an error here would stop vLLM)
        print(f"wemask: the WeMask vLLM plugin is off in this process ({err}); a masked run folder is served "
              f"unmasked here: fix the above or set {PLUGIN_VARIABLE}=0 to silence this", file=sys.stderr)


def needed() -> bool:
    """Whether this vLLM process needs the plugin: asked for, started by wemask, or serving a wemask folder."""
    setting = os.environ.get(PLUGIN_VARIABLE)
    if setting in ("0", "1"):
        return setting == "1"
    return os.environ.get(ARM_VARIABLE) == "1" or any(carries_wemask(word) for word in command_line_paths())


def command_line_paths() -> list[str]:
    """The words of this process's command line that could name a model folder (`--model=X` gives X). vLLM's
    engine and worker processes keep the parent's `sys.argv` (fork, or multiprocessing's spawn)."""
    return [word.split("=", 1)[-1] for word in sys.argv[1:] if not word.startswith("-") or "=" in word]


def carries_wemask(folder: str) -> bool:
    path = Path(folder)
    return any((path / name).is_file() for name in WEMASK_FILES)


def activate() -> None:
    """Wrap every model loader's `load_model` (once per process); a CompatError when vLLM's loaders moved."""
    from wemask_cli.compat.vllm import wrap_model_loaders

    wrap_model_loaders(masked_load_model)


def masked_load_model(original):
    """A loader's `load_model` that checks the folder's mask first and installs it after the weights load."""

    @functools.wraps(original)
    def load_model(self, vllm_config, model_config, *args, **kwargs):
        if getattr(_loading, "active", False):
            return original(self, vllm_config, model_config, *args, **kwargs)
        _loading.active = True
        try:
            return load_masked(original, self, vllm_config, model_config, *args, **kwargs)
        finally:
            _loading.active = False

    return load_model


def load_masked(original, loader, vllm_config, model_config, *args, **kwargs):
    from wemask_cli.engines.vllm.support import saved_wemask_for_vllm
    from wemask_cli.engines.vllm.tensor_mask import SUPPORTED_ARCHITECTURES, VllmEngineError, arm, compiles, install_wemask, unsupported_architecture
    from wemask_cli.models.weights import require_finite_folder

    served = mask_from_environment()  # `wemask vllm-serve`'s mask, which its own checks resolved
    config = served if served is not None else saved_wemask_for_vllm(model_config.model)  # one line before weights load
    saved = config is not None and config.active
    started_by_wemask = os.environ.get(ARM_VARIABLE) == "1"  # which checked the weights already
    if saved and not started_by_wemask:
        require_finite_folder(model_config.model)
    armed = saved or started_by_wemask
    architectures = list(getattr(model_config, "architectures", None) or [])
    if armed and not set(architectures) & set(SUPPORTED_ARCHITECTURES):
        if saved:
            raise VllmEngineError(unsupported_architecture(architectures[0] if architectures else "(none)"))
        armed = False  # WEMASK_VLLM_ARM on a model the mask does not cover: leave it plain
    if armed:
        key_compile_cache(vllm_config)
    model = original(loader, vllm_config, model_config, *args, **kwargs)
    compiled = armed and compiles(model)
    if compiled:
        arm(model)  # before vLLM compiles: the graph then carries the mask's code on every layer
    if saved:
        install_wemask(model, config)
    announce(config if saved else None, compiled)
    return model


def mask_from_environment():
    """The mask a `wemask vllm-serve` server was started with (MASK_VARIABLE; inactive for none), None outside one."""
    import json

    from wemask_cli.method.config import WeMaskConfig

    text = os.environ.get(MASK_VARIABLE)
    return WeMaskConfig.from_dict(json.loads(text)) if text else None


def announce(config, armed: bool) -> None:
    """Say what this engine holds, truthfully: the saved mask, an armed compiled model, or nothing (eager)."""
    from wemask_cli.runtime.tested import warn_untested_versions

    warn_untested_versions()  # vLLM's, and any other library's, outside what wemask was tested on: once per process
    if config is not None:
        logger.warning("wemask: WeMask in vLLM: %s", config.describe())
    elif armed:
        logger.warning("wemask: vLLM model armed for WeMask by %s=1 (masked forward on every layer, no mask yet)",
                       ARM_VARIABLE)


def key_compile_cache(vllm_config) -> None:
    """Key vLLM's compile cache on the mask's code (vllm_config.additional_config is part of the key)."""
    if isinstance(vllm_config.additional_config, dict):
        vllm_config.additional_config["wemask"] = mask_code_fingerprint()


def mask_code_fingerprint() -> str:
    """A hash of the masked forward's source file: the compiled graph depends on it, not on the dims (a buffer)."""
    from importlib.resources import files

    source = files(__package__).joinpath("tensor_mask.py").read_bytes()  # the installed module's own file (wheel or checkout)
    return hashlib.sha256(source).hexdigest()[:16]
