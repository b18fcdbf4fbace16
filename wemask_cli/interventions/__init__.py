"""Layer 2, core (ranks: tests/test_layers.py).

Interventions: WeMask and the sink paper's remedies behind one seam (torch-free at import).

    from wemask_cli.interventions import install_all, load_saved, configs_from_options
    installation = install_all(model, [WeMaskConfig(mask_rate=0.3, me_layer=11), GatedNorm(norms="both")])
    installation.parameters()           # the trainable tensors the remedies added (requires_grad=True)
    save_interventions("runs/x", installation)  # interventions.json + interventions.safetensors (+ wemask_config.json)
    installation.remove()               # exactly the hooks and modules it added

    saved = load_saved("runs/x")        # SavedRun | None (also reads a legacy wemask_config.json alone)
    installation = saved.install(model) # the same configs and trained weights

Each intervention is a registered dataclass (registry.KINDS) with `install(model, *, active=None)`; its fields
declared with `flag(default, help)` are its command-line flags and recipe keys (`--gated-norm-rank`). Kinds from
other packages register through the entry-point group `wemask.interventions` (see registry.py).
"""

from __future__ import annotations

from wemask_cli.interventions.base import Active, FlagSpec, Installed, Intervention, InterventionConfigError
from wemask_cli.interventions.flags import flag
from wemask_cli.interventions.installation import Installation, install_all
from wemask_cli.interventions.registry import config_from_dict, configs_from_options, flag_specs, kinds, register
from wemask_cli.interventions.saved import INTERVENTIONS_FILE, WEIGHTS_FILE, SavedRun, load_saved, save_configs, save_interventions
from wemask_cli.interventions.wemask import WeMask

__all__ = [
    "Active", "FlagSpec", "INTERVENTIONS_FILE", "Installation", "Installed", "Intervention",
    "InterventionConfigError", "SavedRun", "WEIGHTS_FILE", "WeMask", "config_from_dict", "configs_from_options",
    "flag", "flag_specs", "install_all", "kinds", "load_saved", "register", "save_configs", "save_interventions",
]  # fmt: skip
