"""What the vLLM engine can run, said in one line before any model loads; and the mask a model folder carries."""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path

from wemask_cli.compat.vllm import cpu_attention_head_sizes
from wemask_cli.engines.vllm.install import INSTALL_HINT
from wemask_cli.engines.vllm.tensor_mask import NOT_RUNNABLE, SUPPORTED_ARCHITECTURES, InstalledMask, VllmEngineError, check_config, install_wemask
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError

LOGGING_VARIABLE = "VLLM_LOGGING_LEVEL"
QUIET_LEVEL = "ERROR"  # vLLM's start-up prints ~35 INFO and ~15 WARNING lines (on stdout too); its errors stay


def require_vllm():
    """The vllm module, or a VllmEngineError saying how to install it. wemask's own vLLM engines log at ERROR
    unless the user set VLLM_LOGGING_LEVEL (read by vLLM when it is first imported, and by its child processes)."""
    user_level = os.environ.setdefault(LOGGING_VARIABLE, QUIET_LEVEL) != QUIET_LEVEL
    try:
        import vllm
    except ImportError as err:
        raise VllmEngineError(f"vLLM is not installed ({err}): {INSTALL_HINT}") from None
    if not user_level:
        logging.getLogger("vllm").setLevel(QUIET_LEVEL)  # also when vllm was imported before
    return vllm


def folder_config(folder: str | Path) -> dict | None:
    """The model folder's config.json (its text_config for a multimodal one), None without one (a hub id)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    return config.get("text_config") or config


def check_mask_fits_folder(folder: str | Path, config: WeMaskConfig) -> None:
    """The saved mask's layers and recorded dims against the folder's config.json, before any weight loads."""
    from wemask_cli.method.wemask_hook import check_recorded_dims

    model = folder_config(folder)
    if model is None or "num_hidden_layers" not in model or "hidden_size" not in model:
        return
    try:
        layers = config.layer_indices(int(model["num_hidden_layers"]))
        if config.dims is not None and layers:
            check_recorded_dims(config, layers, int(model["hidden_size"]))
    except WeMaskError as err:
        raise VllmEngineError(f"{folder}: the saved WeMask does not fit this model: {err}") from None


CPU_KERNEL_ERROR = "Unsupported CPU attention configuration"  # vLLM-CPU's attention op, for a shape it has no kernel for
CPU_LIMIT_FIX = "use --engine transformers (or vLLM on a GPU)"


def head_size(model: dict) -> int | None:
    """The attention head size of a model's config.json: head_dim, else hidden_size / num_attention_heads."""
    if model.get("head_dim"):
        return int(model["head_dim"])
    if model.get("hidden_size") and model.get("num_attention_heads"):
        return int(model["hidden_size"]) // int(model["num_attention_heads"])
    return None


def check_cpu_attention(model: dict, where: str, fix: str = CPU_LIMIT_FIX) -> None:
    """For vLLM on a CPU: refuse, before it starts, a model (its config.json as a dict, named by `where`) whose head
    size vLLM-CPU's attention kernels do not take (its first forward would fail with 'Unsupported CPU attention
    configuration'); `fix` says what to do instead."""
    size = head_size(model)
    if size is None:
        return
    sizes = cpu_attention_head_sizes()
    if sizes and size not in sizes:
        raise VllmEngineError(
            f"{where}: vLLM's CPU build has no attention kernel for this model's head size {size} (it takes "
            f"{', '.join(map(str, sizes))}), a limit of vLLM-CPU: {fix}"
        )


@contextmanager
def cpu_kernel_errors(source: str):
    """vLLM-CPU's attention op refusing a configuration (a RuntimeError from its kernels while it runs) as one line."""
    try:
        yield
    except RuntimeError as err:
        if CPU_KERNEL_ERROR not in str(err):
            raise
        detail = " ".join(str(err).split())[:200]
        raise VllmEngineError(f"vLLM's CPU build cannot run {source} ({detail}), a limit of vLLM-CPU: {CPU_LIMIT_FIX}") from None


def check_folder_architecture(folder: str | Path) -> None:
    """Refuse a model folder whose config.json names an architecture the vLLM mask does not cover."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return  # a hub id or an adapter folder: vLLM itself reports what it cannot load
    architectures = json.loads(path.read_text()).get("architectures") or ["(none)"]
    if architectures[0] not in SUPPORTED_ARCHITECTURES:
        why = f" ({NOT_RUNNABLE[architectures[0]]})" if architectures[0] in NOT_RUNNABLE else ""
        raise VllmEngineError(
            f"{folder}: architecture {architectures[0]} is not covered by the vLLM mask{why} (covered: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}): use --engine transformers"
        )


def saved_wemask_for_vllm(folder: str | Path) -> WeMaskConfig | None:
    """The WeMask a model folder carries (interventions.json or wemask_config.json), None without one.

    A VllmEngineError when the folder also carries remedies (GatedNorm, PreAffine, gated attention: modules
    vLLM's model classes do not have) or a mask vLLM cannot run (tokens='massive').
    """
    from wemask_cli.interventions import load_saved

    if not Path(folder).is_dir():
        return None
    saved = load_saved(folder)
    if saved is None:
        return None
    if saved.remedies:
        kinds = ", ".join(remedy.kind for remedy in saved.remedies)
        raise VllmEngineError(
            f"{folder} carries {kinds}, which add modules vLLM's model classes do not have: serve it with the "
            "transformers engine (`wemask infer/eval --engine transformers`), or train without the remedies"
        )
    if saved.wemask is not None:
        check_config(saved.wemask)
        if saved.wemask.active:
            check_folder_architecture(folder)
            check_mask_fits_folder(folder, saved.wemask)
    return saved.wemask


def install_from_folder(model, folder: str | Path) -> InstalledMask | None:
    """Install the folder's saved WeMask into a loaded vLLM model; None (model unchanged) when it carries none."""
    config = saved_wemask_for_vllm(folder)
    if config is None or not config.active:
        return None
    return install_wemask(model, config)


def vllm_dtype(dtype: str) -> str:
    """wemask's --dtype for vLLM: auto means float32 on the CPU (as the transformers engine does)."""
    import torch

    if dtype == "auto":
        return "auto" if torch.cuda.is_available() else "float32"
    return dtype
