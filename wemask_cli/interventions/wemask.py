"""WeMask as an intervention (kind "wemask"): the config is method.config.WeMaskConfig, installed by apply_wemask."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions.base import Active, Installed, Intervention, InterventionConfigError
from wemask_cli.interventions.registry import register
from wemask_cli.method.config import WeMaskConfig


@register
@dataclass
class WeMask(Intervention):
    """WeMask (SPEC section 3). Its flags are parsed by masking.MaskRequest, so its fields declare none here."""

    config: WeMaskConfig

    kind = "wemask"
    has_parameters = False

    def __post_init__(self) -> None:
        if not isinstance(self.config, WeMaskConfig):
            raise InterventionConfigError(f"WeMask needs a WeMaskConfig, got {type(self.config).__name__}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, **self.config.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> "WeMask":
        return cls(WeMaskConfig.from_dict({k: v for k, v in data.items() if k != "kind"}))

    def describe(self) -> str:
        return f"WeMask {self.config.describe()}"

    @property
    def active(self) -> bool:
        return self.config.active

    def install(self, model, *, active: Active | None = None) -> Installed:
        """apply_wemask (replacing any WeMask already on the model); the resolved config records the dims."""
        from wemask_cli.method.wemask_hook import apply_wemask

        handle = apply_wemask(model, self.config, active=active)
        return Installed(WeMask(handle.config), records=handle.records)
