"""The flags WeMask declares (interventions/wemask.py) parsed once into a typed `MaskRequest`, and resolved into
WeMaskConfigs for a loaded model.

Train, infer and eval all use it: CLI strings and recipe values (numbers, lists) parse the same way, with
one clear line on bad input, before anything is loaded. Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime import progress
from wemask_cli.runtime.errors import WeMaskError

if TYPE_CHECKING:
    from wemask_cli.models.loading import LoadedModel

OVERRIDABLE = ("select", "layers", "strength", "tokens", "seed")  # fields a flag overrides in a saved config


@dataclass(frozen=True)
class MaskRequest:
    """What the user asked for; None everywhere means 'nothing given' (the model's saved config, else no mask)."""

    rates: list[float] | None = None
    me_layer: int | str | None = None  # a 0-based layer, "auto", or None
    select: str | None = None
    layers: str | None = None
    strength: float | None = None
    tokens: str | None = None
    seed: int | None = None

    @classmethod
    def parse(cls, mask_rate=None, me_layer=None, select=None, layers=None, strength=None, tokens=None, seed=None) -> MaskRequest:
        """From CLI strings or recipe values: '0,0.3' or 0.3 or [0, 0.3]; 'auto' or '11' or 11."""
        request = cls(parse_mask_rates(mask_rate), parse_me_layer(me_layer), select, layers, strength, tokens, seed)
        probe = {name: getattr(request, name) for name in OVERRIDABLE if getattr(request, name) is not None}
        WeMaskConfig(mask_rate=0.0, **probe)  # checks select, layers, strength, tokens with WeMaskConfig's own messages
        return request

    @classmethod
    def from_options(cls, options: dict, seed=None) -> MaskRequest:
        """From parsed options or resolved settings keyed by the flags WeMask declares (interventions/wemask.py)."""
        from wemask_cli.interventions.registry import everywhere_flags

        return cls.parse(**{dest: options.get(dest) for dest in everywhere_flags()}, seed=seed)

    def overrides(self) -> dict:
        """The fields given, as WeMaskConfig keyword arguments (mask rate and ME layer apart)."""
        return {name: getattr(self, name) for name in OVERRIDABLE if getattr(self, name) is not None}

    def effective_me_layer(self, saved: WeMaskConfig | None) -> int | str | None:
        """--me-layer as given; 'auto' when a positive rate masks from the ME layer and neither the flag nor the
        saved config names it (so `--mask-rate 0.3` alone locates the layer, once per model, cached)."""
        if self.me_layer is not None or not self.rates or not any(rate > 0 for rate in self.rates):
            return self.me_layer
        base = saved or WeMaskConfig()
        from_me_layer = (self.layers or base.layers) in ("from-me", "me-only")
        return "auto" if from_me_layer and base.me_layer is None else None

    def configs(self, loaded: LoadedModel, mode: str | None = None) -> list[WeMaskConfig | None]:
        """One config per requested rate; without rates, the model's saved config (or no mask: [None]).

        Flags override the saved config field by field; the saved recorded dims are kept when nothing they
        depend on changed. `auto` runs a quick locate (cached per model).
        """
        saved = loaded.saved_wemask
        overrides = self.overrides()
        if self.rates is None and saved is None:
            if overrides or self.me_layer is not None:
                raise WeMaskError("WeMask flags were given without --mask-rate: add --mask-rate R (e.g. 0.3)")
            return [None]
        me_layer = self.effective_me_layer(saved)
        if me_layer is not None:  # checked first: 'auto' runs a locate
            overrides["me_layer"] = resolve_me_layer(me_layer, loaded)
        if mode is not None:
            overrides["mode"] = mode
        if self.rates is None:
            progress.say(f"Applying the WeMask config saved with {loaded.source}: {saved.describe()}")
            return with_direction([saved.with_updates(**overrides) if overrides else saved], loaded)
        base = saved or WeMaskConfig()
        return with_direction([base.with_updates(mask_rate=rate, **overrides) for rate in self.rates], loaded)

    def needs_direction(self, saved: WeMaskConfig | None) -> bool:
        """Whether resolving these flags estimates a massive direction (so a transformers model must be loaded)."""
        select = self.select or (saved.select if saved else None)
        placed = self.layers is not None or self.me_layer is not None or self.select is not None
        return select == "direction" and (placed or saved is None or saved.vectors is None)


def with_direction(configs: list[WeMaskConfig], loaded: LoadedModel) -> list[WeMaskConfig]:
    """The configs, each active select='direction' one with its massive direction (estimated once per placement on
    the locate prompts, on the model as loaded, without a mask)."""
    from wemask_cli.mask_request.me_layer_cache import locate_prompt_ids

    estimated: dict = {}
    done = []
    for config in configs:
        if config.active and config.select == "direction" and config.vectors is None:
            key = (config.me_layer, config.layers)
            if key not in estimated:
                from wemask_cli.method.wemask_hook import estimate_on

                with progress.status("Estimating the massive direction on the locate prompts..."):
                    estimated[key] = estimate_on(loaded.model, config, locate_prompt_ids(loaded))
            config = config.with_updates(vectors=estimated[key][0], direction=estimated[key][1])
        done.append(config)
    return done


def parse_mask_rates(value) -> list[float] | None:
    """'0,0.3,1.0', 0.3 or [0, 0.3] -> [0.0, 0.3, ...] (repeats dropped, order kept); None stays None."""
    if value is None:
        return None
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    rates = []
    for part in parts:
        try:
            if isinstance(part, bool):
                raise ValueError
            rate = float(part)
        except (TypeError, ValueError):
            shown = str(part).strip()
            raise WeMaskError(f"--mask-rate {value!r}: {shown!r} is not a number; use values in [0, 1], e.g. 0.3 or 0,0.3,1.0") from None
        if not 0.0 <= rate <= 1.0:
            raise WeMaskError(f"--mask-rate {rate:g} is out of range: use a number in [0, 1]")
        rates.append(rate)
    return list(dict.fromkeys(rates))


def parse_me_layer(value) -> int | str | None:
    """'auto', a 0-based layer ('11' or 11), or None."""
    if value is None or value == "auto":
        return value
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        layer = int(value)
    except (TypeError, ValueError):
        raise WeMaskError(f"--me-layer {value!r} is not valid: use a 0-based layer index or 'auto'") from None
    if layer < 0:
        raise WeMaskError(f"--me-layer {layer} is not valid: use a 0-based layer index >= 0 or 'auto'")
    return layer


def resolve_me_layer(me_layer: int | str | None, loaded: LoadedModel) -> int | None:
    """An explicit layer, or 'auto': the located ME layer (cached per model)."""
    if me_layer != "auto":
        return me_layer
    from wemask_cli.mask_request.me_layer_cache import cached_me_layer

    with progress.status("Locating the ME layer (once per model, cached)..."):  # a cache hit ends it at once
        layer = cached_me_layer(loaded)
    if layer is None:
        raise WeMaskError(
            f"--me-layer auto: no ME layer found in {loaded.source} (no massive activation); give --me-layer N to mask anyway"
        )
    progress.say(f"ME layer (auto): {layer} (0-based)")
    return layer
