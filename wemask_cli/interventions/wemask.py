"""WeMask as an intervention (kind method.config.KIND): the config is method.config.WeMaskConfig, installed by
apply_wemask. It declares its flags here, as every kind does; they are every command's (infer, eval, locate's
--mask-rate, the trainers), and mask_request.flags.MaskRequest parses them, since its config is resolved per model
(the ME layer located, a saved config overridden field by field)."""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.interventions.base import Active, Installed, Intervention, InterventionConfigError
from wemask_cli.interventions.flags import FlagSpec
from wemask_cli.interventions.registry import register
from wemask_cli.method.config import KIND, WeMaskConfig

FLAGS = (
    FlagSpec("--mask-rate", str, "Share r in [0, 1] of dims to mask; a comma list (0,0.3,1.0) runs each rate.", short=("-r",)),
    FlagSpec("--me-layer", str, "0-based ME layer, or 'auto' to locate it (cached per model; the default with a positive --mask-rate)."),
    FlagSpec("--select", str, "weight (the method: top |RMSNorm weight|) | activation | random | direction (remove the first token's "
             "component along the massive direction, estimated on the locate prompts; with --mask-rate 1, --strength is alpha)."),
    FlagSpec("--layers", str, "from-me (default) | me-only | all | a:b (0-based, b exclusive) | a: (to the last layer) | :b (from layer 0)."),
    FlagSpec("--strength", float, "Masking strength in [0, 1]: dims are multiplied by 1 - strength (--select direction: the share alpha of "
             "the component removed)."),
    FlagSpec("--tokens", str, "first (default: the first real token of each sequence) | massive (also any prompt token whose norm is > 20x "
                              "the median; transformers engine only)."),
)  # fmt: skip


@register
@dataclass
class WeMask(Intervention):
    """WeMask (SPEC section 3). Its flags are FLAGS (every command's: `everywhere`), parsed by MaskRequest."""

    config: WeMaskConfig

    kind = KIND
    has_parameters = False
    everywhere = True

    @classmethod
    def flags(cls) -> list[FlagSpec]:
        return list(FLAGS)

    @classmethod
    def from_options(cls, options: dict) -> None:
        """None: a WeMask config needs the loaded model (MaskRequest.configs resolves it from the same options)."""
        return None

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
