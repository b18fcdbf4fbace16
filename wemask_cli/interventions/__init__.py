"""Interventions: WeMask and the sink paper's remedies behind one seam (torch-free at import).

    from wemask_cli.interventions import install_all, load_saved, configs_from_options
    installation = install_all(model, [WeMaskConfig(mask_rate=0.3, me_layer=11), GatedNorm(norms="both")])
    installation.parameters()           # the trainable tensors the remedies added (requires_grad=True)
    installation.save("runs/x")         # interventions.json + interventions.safetensors (+ wemask_config.json)
    installation.remove()               # exactly the hooks and modules it added

    saved = load_saved("runs/x")        # SavedRun | None (also reads a legacy wemask_config.json alone)
    installation = saved.install(model) # the same configs and trained weights

Each intervention is a registered dataclass (registry.KINDS) with `install(model, *, active=None)`.
"""

from __future__ import annotations

from pathlib import Path

from ..method.config import WeMaskConfig
from .base import Active, FlagSpec, Installed, Intervention, InterventionConfigError
from .registry import config_from_dict, configs_from_options, flag_specs, kinds, register
from .saved import INTERVENTIONS_FILE, WEIGHTS_FILE, SavedRun, load_saved, save_configs, save_interventions
from .wemask import WeMask

__all__ = [
    "Active", "FlagSpec", "INTERVENTIONS_FILE", "Installation", "Installed", "Intervention",
    "InterventionConfigError", "SavedRun", "WEIGHTS_FILE", "WeMask", "config_from_dict", "configs_from_options",
    "flag_specs", "install_all", "kinds", "load_saved", "register", "save_configs", "save_interventions",
]  # fmt: skip


class Installation:
    """Several installed interventions, one per kind, in install order (WeMask first, then the remedies)."""

    def __init__(self, items: list[Installed]):
        self.items = items

    @property
    def configs(self) -> list[Intervention]:
        """The resolved configs (WeMask with its dims), as saved."""
        return [item.config for item in self.items]

    @property
    def wemask(self) -> WeMaskConfig | None:
        """The resolved WeMaskConfig, if WeMask is one of the items."""
        return next((item.config.config for item in self.items if item.config.kind == "wemask"), None)

    def parameters(self) -> list:
        return [p for item in self.items for p in item.parameters()]

    def state_dict(self) -> dict:
        """{"<kind>.<local name>": tensor} over every item with parameters."""
        return {f"{item.config.kind}.{k}": v for item in self.items for k, v in item.state_dict().items()}

    def load_state_dict(self, weights: dict) -> None:
        """Load weights saved by state_dict(); names of kinds not installed are an error."""
        own = {item.config.kind for item in self.items}
        stray = sorted({name.split(".", 1)[0] for name in weights} - own)
        if stray:
            raise InterventionConfigError(f"weights for {stray} given, but those interventions are not installed")
        for item in self.items:
            prefix = f"{item.config.kind}."
            if item.config.has_parameters:
                item.load_state_dict({k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)})

    def describe(self) -> list[str]:
        return [item.config.describe() for item in self.items]

    def save(self, directory: str | Path) -> list[Path]:
        """save_interventions(directory, self); returns the paths written."""
        return save_interventions(directory, self)

    def remove(self) -> None:
        """Remove every item, last installed first (idempotent)."""
        for item in reversed(self.items):
            item.remove()

    def __enter__(self) -> "Installation":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _as_intervention(config) -> Intervention:
    if isinstance(config, WeMaskConfig):
        return WeMask(config)
    if not isinstance(config, Intervention):
        raise TypeError(f"install_all takes Intervention configs or WeMaskConfig, not {type(config).__name__}")
    return config


def install_all(model, configs, *, weights: dict | None = None, active: Active | None = None) -> Installation:
    """Install `configs` (Interventions; a WeMaskConfig is taken as WeMask) on `model`, one per kind, in registry
    order; load `weights` (as saved) when given, else the remedies start at the identity. `active` is passed
    to every install (see base.Active). On any error, what was installed is removed before re-raising."""
    order = list(kinds())
    chosen = sorted((_as_intervention(c) for c in configs if c is not None), key=lambda c: order.index(c.kind))
    names = [c.kind for c in chosen]
    if len(set(names)) != len(names):
        raise InterventionConfigError(f"one intervention per kind: got {names}")
    installation = Installation([])
    try:
        for config in chosen:
            installation.items.append(config.install(model, active=active))
        if weights:
            installation.load_state_dict(weights)
    except BaseException:
        installation.remove()
        raise
    return installation
