"""The quantization schemes `--quantize` offers, declared once and found through a registry (torch-free).

A scheme is one `Scheme` (its name, the grid its weights and its inputs are rounded to, the block sizes it
takes, a description) passed to `register`. Parsing and checking `--quantize` and `--fp4-block-size`, the error
lines and the flags' help all read the registry; nothing else names a scheme. A new scheme is one
`register(Scheme(...))` call here, or in another package's module named under the entry-point group
`wemask.quantization` (pyproject: `[project.entry-points."wemask.quantization"] my_scheme = "my_pkg.my_scheme"`),
imported the first time the schemes are read (when `wemask eval` is built: its --help lists them).
This module must import without torch (`wemask eval --help` reads it): a grid's rounding function imports the
torch math when it is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from wemask_cli.eval.quantize import grids
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.registry import Registry, RegistryError

DEFAULT_BLOCK_SIZE = 16  # --fp4-block-size's default


@dataclass(frozen=True)
class Grid:
    """A number format values are rounded to: `round(x, block_size)` -> x on the grid along its last dim, float32."""

    name: str
    round: Callable


@dataclass(frozen=True)
class Scheme:
    """One `--quantize` choice: the grids of weights and of inputs (None: full precision), the --fp4-block-size
    values it takes (empty: it has no blocks), a short description for --help, and the module that declares it (a
    built-in scheme's is this module, SCHEMES' one built-in module)."""

    name: str
    weights: Grid | None
    inputs: Grid | None
    description: str
    block_sizes: tuple[int, ...] = ()
    module: str = field(default="", compare=False)


def check_name(scheme: Scheme) -> None:
    if scheme.name != scheme.name.strip().lower() or "," in scheme.name:
        raise RegistryError(f"a scheme name is lower case without commas or spaces, not {scheme.name!r}")


SCHEMES: Registry[Scheme] = Registry("quantization scheme", "wemask.quantization", Scheme, package=__package__,
                                     builtin=("schemes",), flag="--quantize", check=check_name,
                                     module_of=lambda scheme: scheme.module)


def register(scheme: Scheme) -> Scheme:
    """Make `scheme` a --quantize choice (after those registered before it), named by its module and name."""
    return SCHEMES.register(scheme, f"{scheme.module or 'the scheme'}.{scheme.name}")


def schemes() -> dict[str, Scheme]:
    """Every registered scheme by name: the built-ins, then the plugins'."""
    return SCHEMES.entries()


def choices() -> str:
    """The registered names, comma-separated (for error lines)."""
    return ", ".join(schemes())


def lookup(name: str) -> Scheme:
    known = schemes()
    if name not in known:
        raise WeMaskError(f"unknown quantization scheme {name!r}: choose from {choices()}")
    return known[name]


def block_sizes() -> tuple[int, ...]:
    """Every block size a registered scheme takes."""
    return tuple(sorted({size for scheme in schemes().values() for size in scheme.block_sizes}))


def check_block_size(chosen: list[Scheme], block_size: int) -> None:
    """--fp4-block-size must suit every chosen scheme with blocks; without one, some registered scheme."""
    blocked = [scheme.block_sizes for scheme in chosen if scheme.block_sizes] or [block_sizes()]
    for sizes in blocked:
        if block_size not in sizes:
            raise WeMaskError(f"--fp4-block-size must be one of {', '.join(map(str, sizes))}, not {block_size}")


def check_alpha(alpha: float | None) -> None:
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise WeMaskError(f"--smoothquant takes α in [0, 1] (0.5 is usual), not {alpha}")


def parse_schemes(text: str, *, block_size: int = DEFAULT_BLOCK_SIZE, smoothquant: float | None = None) -> list[str]:
    """`--quantize none,w8a8,...` -> validated, de-duplicated names in the given order (the block size and
    SmoothQuant's α are checked too, so a bad flag fails before the model loads)."""
    chosen = list(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    if not chosen:
        raise WeMaskError(f"--quantize needs at least one of {choices()}")
    check_block_size([lookup(name) for name in chosen], block_size)
    check_alpha(smoothquant)
    return chosen


def quantize_help() -> str:
    """--quantize's help: every registered scheme with its description."""
    listed = ", ".join(f"{scheme.name} ({scheme.description})" for scheme in schemes().values())
    return f"Comma list of simulated quantizations, swept like mask rates: {listed}."


def block_size_help() -> str:
    """--fp4-block-size's help: the schemes with blocks and the sizes they take."""
    blocked = [scheme.name for scheme in schemes().values() if scheme.block_sizes]
    return f"--quantize {', '.join(blocked)}: values per scale block ({' or '.join(map(str, block_sizes()))})."


INT8 = Grid("int8", grids.round_int8)
INT4 = Grid("int4", grids.round_int4)
FP4 = Grid("fp4", grids.quantize_fp4)

register(Scheme("none", None, None, "full precision", module=__name__))
register(Scheme("w8a8", INT8, INT8, "INT8 weights and inputs", module=__name__))
register(Scheme("w4a8", INT4, INT8, "INT4 weights, INT8 inputs", module=__name__))
register(Scheme("w4a4", INT4, INT4, "INT4 weights and inputs", module=__name__))
register(Scheme("fp4", FP4, FP4, "FP4 E2M1 weights and inputs, one scale per block", block_sizes=(16, 32), module=__name__))
