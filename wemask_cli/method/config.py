"""WeMaskConfig: the intervention as data, validated, saved to and loaded from wemask_config.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from wemask_cli.runtime.atomic import atomic_write, atomic_write_text
from wemask_cli.runtime.errors import WeMaskError

KIND = "wemask"  # WeMask's kind: its interventions.json record, its owned hooks (method/wemask_hook.py)

CONFIG_NAME = "wemask_config.json"
CONFIG_VERSION = 1

SELECTIONS = ("weight", "activation", "random", "direction")
LAYER_RANGES = ("from-me", "me-only", "all")
TOKEN_RULES = ("first", "massive")
MODES = ("aware", "free")
DIMS_DEPEND_ON = ("mask_rate", "me_layer", "select", "layers", "seed")
DIRECTION_DEPENDS_ON = ("me_layer", "select", "layers")  # the massive direction is estimated per masked layer
DIRECTION_FILE = "wemask_direction.safetensors"  # select='direction': the unit vectors, beside wemask_config.json


class WeMaskConfigError(WeMaskError, ValueError):
    """An invalid WeMask setting; a ValueError for API users, a one-line error on the CLI."""


LAYER_SPAN_FORMS = "a 0-based range 'a:b' (b exclusive), 'a:' (layer a to the last) or ':b' (layers 0 to b-1)"


def parse_layer_span(
    layers: str, named: tuple[str, ...] = LAYER_RANGES, what: str = "layers", error: type[Exception] = WeMaskConfigError
) -> tuple[int, int | None] | None:
    """(start, stop) of a layer range 'a:b', 'a:' or ':b' (0-based, stop exclusive, None: to the last layer); None for
    a name in `named`. Every user of a layer range parses it here, so all accept and refuse the same; `what` and
    `error` name the setting and the caller's error family."""
    if layers in named:
        return None
    start, sep, stop = str(layers).partition(":")
    try:
        if not sep or not (start.strip() or stop.strip()):
            raise ValueError
        span = int(start) if start.strip() else 0, int(stop) if stop.strip() else None
    except ValueError:
        raise error(f"{what}={layers!r} is not valid: use one of {', '.join(named)} or {LAYER_SPAN_FORMS}") from None
    if span[0] < 0 or (span[1] is not None and span[1] <= span[0]):
        raise error(f"{what}={layers!r} is an empty or negative range: use 'a:b' with 0 <= a < b")
    return span


def span_layers(
    span: tuple[int, int | None], num_layers: int, layers: str, what: str = "layers", error: type[Exception] = WeMaskConfigError
) -> list[int]:
    """The 0-based layers a parsed span names in a model of `num_layers`, checked against its depth."""
    stop = num_layers if span[1] is None else span[1]
    if stop > num_layers or span[0] >= stop:
        raise error(f"{what}={layers!r} is outside the model: it has {num_layers} layers, use 0..{num_layers - 1}")
    return list(range(span[0], stop))


def parse_dims(dims) -> dict[int, list[int]]:
    """{layer: [dim, ...]} with integer keys (JSON gives strings), or a WeMaskConfigError naming the problem."""
    problem = "it is not a mapping of 0-based layer to a list of dims"
    if isinstance(dims, dict):
        try:
            return dict(_layer_dims(layer, values) for layer, values in dims.items())
        except _RepeatedDim as err:
            problem = str(err)
        except (TypeError, ValueError):
            pass
    raise WeMaskConfigError(
        f"dims={str(dims)[:60]!r} is not valid: {problem}, e.g. {{\"11\": [3, 507]}}; delete 'dims' to reselect them"
    )


class _RepeatedDim(ValueError):
    """A layer lists one dim twice."""


def _layer_dims(layer, values) -> tuple[int, list[int]]:
    """(the layer as an int, its dims sorted); TypeError unless the dims are 0-based ints, _RepeatedDim for a repeat."""
    if isinstance(values, (str, bytes)) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise TypeError
    if len(set(values)) != len(values):
        raise _RepeatedDim(f"layer {layer} lists a dim twice")
    return int(layer), sorted(values)


@dataclass
class WeMaskConfig:
    """What WeMask masks: the `mask_rate` share of dims, from `me_layer`, in the first real token's attention input.

    `dims` records the chosen dims per layer once applied, so a saved run masks the same dims when reloaded.
    `mode` records how a training run used it (aware: in the training graph; free: at inference only).
    select='direction' removes the share `strength` of the first token's component along the massive direction
    instead of dims (r is 1 or 0: on or off); `direction` records how it was estimated and `vectors` holds it
    ({layer: unit vector}, saved as DIRECTION_FILE, never in the JSON).
    """

    mask_rate: float = 0.0
    me_layer: int | None = None
    select: str = "weight"
    layers: str = "from-me"
    tokens: str = "first"
    strength: float = 1.0
    seed: int = 0
    mode: str | None = None
    dims: dict[int, list[int]] | None = field(default=None, repr=False)
    direction: dict | None = field(default=None, repr=False)
    vectors: dict | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.mask_rate, bool) or not isinstance(self.mask_rate, (int, float)) or not (
            0.0 <= self.mask_rate <= 1.0
        ):
            raise WeMaskConfigError(f"mask_rate={self.mask_rate!r} is out of range: use a number in [0, 1]")
        if isinstance(self.strength, bool) or not isinstance(self.strength, (int, float)) or not (
            0.0 <= self.strength <= 1.0
        ):
            raise WeMaskConfigError(f"strength={self.strength!r} is out of range: use a number in [0, 1]")
        if self.me_layer is not None and (
            isinstance(self.me_layer, bool) or not isinstance(self.me_layer, int) or self.me_layer < 0
        ):
            raise WeMaskConfigError(f"me_layer={self.me_layer!r} is not valid: use a 0-based layer index >= 0")
        if self.select not in SELECTIONS:
            raise WeMaskConfigError(f"select={self.select!r} is unknown: use one of {', '.join(SELECTIONS)}")
        if self.tokens not in TOKEN_RULES:
            raise WeMaskConfigError(f"tokens={self.tokens!r} is unknown: use one of {', '.join(TOKEN_RULES)}")
        if self.select == "direction":
            self.check_direction()
        if self.mode is not None and self.mode not in MODES:
            raise WeMaskConfigError(f"mode={self.mode!r} is unknown: use one of {', '.join(MODES)}")
        span = parse_layer_span(self.layers)
        if span is None and self.layers != "all" and self.me_layer is None and self.active:
            raise WeMaskConfigError(
                f"layers={self.layers!r} needs me_layer: give --me-layer N (0-based) or 'auto', or use layers 'all' or 'a:b'"
            )
        if self.dims is not None:
            self.dims = parse_dims(self.dims)

    def check_direction(self) -> None:
        """select='direction' takes r 0 or 1 (off or on; --strength is alpha) and the first token only."""
        if self.mask_rate not in (0, 1):
            raise WeMaskConfigError(
                f"select='direction' removes a direction, not a share of dims, so mask_rate={self.mask_rate:g} means "
                "nothing: use --mask-rate 1 (on) or 0 (off), and --strength for the share alpha of the component removed"
            )
        if self.tokens != "first":
            raise WeMaskConfigError(
                f"select='direction' is undefined for tokens={self.tokens!r}: the massive direction is estimated on the "
                "first token; use --tokens first with --select direction"
            )
        if self.direction is not None and not isinstance(self.direction, dict):
            raise WeMaskConfigError(f"direction={str(self.direction)[:60]!r} is not valid: delete 'direction' to estimate it again")

    @property
    def active(self) -> bool:
        """Whether this config changes the model at all (r > 0 and strength > 0)."""
        return self.mask_rate > 0 and self.strength > 0

    def num_dims(self, hidden_size: int) -> int:
        """k = floor(r * d), guarded against float error (0.3 * 10 must give 3)."""
        return min(hidden_size, math.floor(self.mask_rate * hidden_size + 1e-9))

    def layer_indices(self, num_layers: int) -> list[int]:
        """The 0-based layers the mask acts on, checked against the model's depth."""
        if self.me_layer is not None and self.me_layer >= num_layers:
            raise WeMaskConfigError(
                f"me_layer={self.me_layer} is outside the model: it has {num_layers} layers, use 0..{num_layers - 1}"
            )
        span = parse_layer_span(self.layers)
        if span is not None:
            return span_layers(span, num_layers, self.layers)
        if self.layers == "all":
            return list(range(num_layers))
        if self.layers == "me-only":
            return [self.me_layer]
        return list(range(self.me_layer, num_layers))

    def with_updates(self, **changes) -> "WeMaskConfig":
        """A copy with some fields changed; recorded dims are dropped when a field they depend on changes value."""
        if any(name in changes and changes[name] != getattr(self, name) for name in DIMS_DEPEND_ON):
            changes.setdefault("dims", None)
        if any(name in changes and changes[name] != getattr(self, name) for name in DIRECTION_DEPENDS_ON):
            changes.setdefault("direction", None)
            changes.setdefault("vectors", None)
        return replace(self, **changes)

    def describe(self) -> str:
        """One line for people: 'r=0.3 from layer 11 (weight, strength 1.0)'."""
        if not self.active:
            return "off (r=0)"
        where = {
            "from-me": f"layers {self.me_layer}+",
            "me-only": f"layer {self.me_layer} only",
            "all": "all layers",
        }.get(self.layers, f"layers {self.layers}")
        extra = f", strength {self.strength:g}" if self.strength != 1.0 else ""
        mode = f", {self.mode}" if self.mode else ""
        tokens = ", massive tokens" if self.tokens == "massive" else ""
        if self.select == "direction":
            return f"massive direction removed (alpha={self.strength:g}) at {where} (0-based{mode})"
        return f"r={self.mask_rate:g} at {where} (0-based; select={self.select}{extra}{tokens}{mode})"

    def to_dict(self) -> dict:
        data = asdict(replace(self, vectors=None))
        del data["vectors"]
        if data["direction"] is None:
            del data["direction"]  # the file every other selection writes stays as it was
        data["dims"] = None if self.dims is None else {str(k): v for k, v in sorted(self.dims.items())}
        return {"version": CONFIG_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict) -> "WeMaskConfig":
        data = dict(data)
        version = data.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise WeMaskConfigError(
                f"wemask config version {version} is not supported (this wemask reads version {CONFIG_VERSION}): upgrade wemask"
            )
        known = {f.name for f in fields(cls)} - {"vectors"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WeMaskConfigError(f"unknown wemask config keys {unknown}: allowed keys are {sorted(known)}")
        if "mask_rate" not in data:
            raise WeMaskConfigError(
                f"the wemask config has no 'mask_rate' (keys: {sorted(data) or 'none'}): "
                "a saved config must say its rate (0 for no mask)"
            )
        return cls(**data)

    def save(self, directory: str | Path) -> Path:
        """Write wemask_config.json atomically (a temporary file, then os.replace), the direction's vectors first."""
        path = Path(directory) / CONFIG_NAME
        if self.vectors is not None:
            save_vectors(directory, self.vectors)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "WeMaskConfig":
        """Load from a wemask_config.json file or a directory holding one."""
        path = Path(path)
        if path.is_dir():
            path = path / CONFIG_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise WeMaskConfigError(f"no wemask config at {path}") from None
        except json.JSONDecodeError as err:
            raise WeMaskConfigError(f"{path} is not valid JSON ({err}): fix or delete it") from None
        if not isinstance(data, dict):
            raise WeMaskConfigError(f"{path} does not hold a JSON object: fix or delete it")
        try:
            config = cls.from_dict(data)
        except WeMaskConfigError as err:
            raise WeMaskConfigError(f"{path}: {err}") from None
        return attach_vectors(config, path.parent)


def attach_vectors(config: WeMaskConfig, directory: str | Path) -> WeMaskConfig:
    """`config` with its saved massive direction read from `directory` (select='direction' with a recorded one)."""
    if config.select != "direction" or config.direction is None or config.vectors is not None:
        return config
    config.vectors = load_vectors(directory)
    return config


def find_saved_config(directory: str | Path) -> WeMaskConfig | None:
    """The WeMaskConfig saved in a model directory, if it carries one."""
    path = Path(directory) / CONFIG_NAME
    return WeMaskConfig.load(path) if path.is_file() else None


def save_vectors(directory: str | Path, vectors: dict) -> Path:
    """Write wemask_direction.safetensors atomically; returns its path."""
    import torch
    from safetensors.torch import save_file

    path = Path(directory) / DIRECTION_FILE
    tensors = {f"layer.{l}": v.detach().to("cpu", torch.float32).contiguous().clone() for l, v in sorted(vectors.items())}
    atomic_write(path, lambda temporary: save_file(tensors, temporary, metadata={"format": "pt", "written_by": "wemask"}))
    return path


def load_vectors(directory: str | Path) -> dict:
    """The vectors a run folder saved; missing, unreadable or not finite: one line."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / DIRECTION_FILE
    if not path.is_file():
        raise WeMaskConfigError(f"{path} is missing: the run's select='direction' mask needs its saved massive direction")
    try:
        tensors = load_file(str(path))
        vectors = {int(name.removeprefix("layer.")): value for name, value in tensors.items()}
    except (SafetensorError, OSError, ValueError) as err:
        raise WeMaskConfigError(f"{path} cannot be read ({err}): the run's massive direction is damaged") from None
    if not all(bool(torch.isfinite(v).all()) for v in vectors.values()):
        raise WeMaskConfigError(f"{path} holds NaN or infinity: the run's massive direction is damaged")
    return vectors
