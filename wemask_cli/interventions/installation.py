"""install_all(): several interventions installed on one model as one `Installation` (torch-free at import)."""

from __future__ import annotations

from wemask_cli.compat.transformers import ignored_on_save, is_model, set_ignored_on_save
from wemask_cli.interventions.base import Active, Installed, Intervention, InterventionConfigError
from wemask_cli.interventions.registry import kinds
from wemask_cli.interventions.wemask import WeMask
from wemask_cli.method.config import WeMaskConfig


class Installation:
    """Several installed interventions, one per kind, in install order (WeMask first, then the remedies)."""

    def __init__(self, items: list[Installed]):
        self.items = items
        self.unsaved: tuple = ()  # (the transformers model, the keys keep_out_of_saves added to its save exclusions)

    @property
    def configs(self) -> list[Intervention]:
        """The resolved configs (WeMask with its dims), as saved."""
        return [item.config for item in self.items]

    @property
    def wemask(self) -> WeMaskConfig | None:
        """The resolved WeMaskConfig, if WeMask is one of the items."""
        return next((item.config.config for item in self.items if isinstance(item.config, WeMask)), None)

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

    def keep_out_of_saves(self, model) -> None:
        """Leave the added modules' tensors out of the model's `save_pretrained` (a PeftModel: of its transformers
        model), through transformers' `_keys_to_ignore_on_save` (compat/transformers.py): they live in interventions.safetensors only, so
        model.safetensors holds the base architecture's weights alone and loads anywhere without unexpected keys.
        A full-model checkpoint resumed by the Trainer then misses exactly these keys, which it accepts silently."""
        root = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
        if not is_model(root):
            return  # not a transformers model: its saving is the caller's
        names = {id(module): name for name, module in root.named_modules()}
        added = [entry[2] for item in self.items for entry in item.modules.values()]
        keys = {f"{names[id(module)]}.{key}" for module in added if id(module) in names for key in module.state_dict()}
        if keys:
            set_ignored_on_save(root, ignored_on_save(root) | keys)
            self.unsaved = (root, keys)

    def remove(self) -> None:
        """Remove every item, last installed first (idempotent), and their keys from the model's save exclusions."""
        for item in reversed(self.items):
            item.remove()
        if self.unsaved:
            root, keys = self.unsaved
            set_ignored_on_save(root, ignored_on_save(root) - keys)
            self.unsaved = ()

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
    to every install (see base.Active). The added tensors are kept out of the model's save_pretrained (saved by
    save_interventions instead). On any error, what was installed is removed before re-raising."""
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
        installation.keep_out_of_saves(model)
    except BaseException:
        installation.remove()
        raise
    return installation
