"""From command-line WeMask flags to WeMaskConfigs: one place that every command (infer, train, eval) uses."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .errors import WeMaskError
from .method.config import WeMaskConfig
from .models import LoadedModel


@dataclass
class MaskFlags:
    """The WeMask flags as typed on the command line (None: not given)."""

    mask_rate: str | None = None  # one rate or a comma list: "0,0.3,1.0"
    me_layer: str | None = None  # "N" or "auto"
    select: str | None = None
    layers: str | None = None
    strength: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        """Parse and check the flags before anything is loaded."""
        self.rates = parse_mask_rates(self.mask_rate)
        self.layer = parse_me_layer(self.me_layer)
        probe = dict(select=self.select, layers=self.layers, strength=self.strength)
        WeMaskConfig(mask_rate=0.0, **{k: v for k, v in probe.items() if v is not None})


def parse_mask_rates(text: str | None) -> list[float] | None:
    """'0,0.3,1.0' -> [0.0, 0.3, 1.0] (repeats dropped, order kept); None stays None."""
    if text is None:
        return None
    rates = []
    for part in str(text).split(","):
        try:
            rate = float(part)
        except ValueError:
            raise WeMaskError(f"--mask-rate {text!r}: {part.strip()!r} is not a number; use values in [0, 1], e.g. 0.3 or 0,0.3,1.0") from None
        if not 0.0 <= rate <= 1.0:
            raise WeMaskError(f"--mask-rate {rate:g} is out of range: use a number in [0, 1]")
        rates.append(rate)
    return list(dict.fromkeys(rates))


def parse_me_layer(text: str | None) -> int | str | None:
    if text is None or text == "auto":
        return text
    try:
        layer = int(text)
    except ValueError:
        raise WeMaskError(f"--me-layer {text!r} is not valid: use a 0-based layer index or 'auto'") from None
    if layer < 0:
        raise WeMaskError(f"--me-layer {layer} is not valid: use a 0-based layer index >= 0 or 'auto'")
    return layer


def resolve_me_layer(me_layer: int | str | None, loaded: LoadedModel) -> int | None:
    """An explicit layer, or 'auto': the located ME layer (cached per model)."""
    if me_layer != "auto":
        return me_layer
    from .locate_cache import cached_me_layer
    from .render import err_console

    with err_console.status("Locating the ME layer (once per model, cached)..."):  # a cache hit ends it at once
        layer = cached_me_layer(loaded)
    if layer is None:
        raise WeMaskError(
            f"--me-layer auto: no ME layer found in {loaded.source} (no massive activation); give --me-layer N to mask anyway"
        )
    print(f"ME layer (auto): {layer} (0-based)", file=sys.stderr)
    return layer


def configs_from_flags(flags: MaskFlags, loaded: LoadedModel, mode: str | None = None) -> list[WeMaskConfig | None]:
    """One config per requested rate; without --mask-rate, the model's saved config (or no mask: [None]).

    Flags override the saved config field by field; the saved recorded dims are kept when nothing they
    depend on changed.
    """
    rates, me_layer = flags.rates, flags.layer
    saved = loaded.saved_wemask
    overrides = {
        name: value
        for name, value in (("select", flags.select), ("layers", flags.layers), ("strength", flags.strength), ("seed", flags.seed))
        if value is not None
    }
    if rates is None and saved is None:
        if overrides or me_layer is not None:
            raise WeMaskError("WeMask flags were given without --mask-rate: add --mask-rate R (e.g. 0.3)")
        return [None]
    if rates is not None:
        require_me_layer(rates, me_layer, flags.layers, saved)
    if me_layer is not None:  # checked first: 'auto' runs a locate
        overrides["me_layer"] = resolve_me_layer(me_layer, loaded)
    if mode is not None:
        overrides["mode"] = mode
    if rates is None:
        print(f"Applying the WeMask config saved with {loaded.source}: {saved.describe()}", file=sys.stderr)
        return [saved.with_updates(**overrides) if overrides else saved]
    base = saved or WeMaskConfig()
    return [base.with_updates(mask_rate=rate, **overrides) for rate in rates]


def require_me_layer(rates: list[float], me_layer, layers: str | None, saved: WeMaskConfig | None) -> None:
    """A positive rate masking from the ME layer needs that layer: from --me-layer or the saved config."""
    base = saved or WeMaskConfig()
    from_me_layer = (layers or base.layers) in ("from-me", "me-only")
    if from_me_layer and me_layer is None and base.me_layer is None and any(r > 0 for r in rates):
        raise WeMaskError("--mask-rate needs --me-layer: give a 0-based layer index, or 'auto' to locate it")
