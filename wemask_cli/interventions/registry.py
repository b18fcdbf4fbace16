"""The registry of intervention kinds: JSON records and parsed options -> configs, torch-free.

Adding an intervention = one module with a registered Intervention subclass whose fields carry their flags
(`flags.flag`): a module of this package listed in BUILTIN, or any installed module named under the entry-point
group `wemask.interventions` (pyproject: `[project.entry-points."wemask.interventions"] my_kind = "my_pkg.my_kind"`),
imported the first time the kinds are read. Trainers, infer and eval read `flag_specs()` and call
`configs_from_options()`; they never name a kind.
"""

from __future__ import annotations

from wemask_cli.interventions.base import FlagSpec, Intervention, InterventionConfigError
from wemask_cli.runtime.registry import Registry, RegistryError

BUILTIN = ("wemask", "gated_norm", "pre_affine", "gated_attention")  # modules of this package, in install order
FLAG_TYPES = (str, int, float, bool)  # what a command-line flag of a kind can parse


def check_flags(cls: type[Intervention]) -> None:
    """A kind's flags must parse: refused at registration, not in --help."""
    unparsable = [spec.name for spec in cls.flags() if spec.type not in FLAG_TYPES]
    if unparsable:
        raise RegistryError(f"{cls.__name__} declares {', '.join(unparsable)} of a type other than str, int, float or bool")


KINDS: Registry[type[Intervention]] = Registry(
    "intervention", "wemask.interventions", Intervention, package=__package__, builtin=BUILTIN,
    name_of=lambda cls: cls.kind, check=check_flags,
)
register = KINDS.register  # class decorator: make `cls` known by its `kind` (for JSON records and options)


def kinds() -> dict[str, type[Intervention]]:
    """Every registered kind, in install order (WeMask first, then the remedies, then the plugins')."""
    return KINDS.entries()


def config_from_dict(data: dict) -> Intervention:
    """An intervention config from its JSON record ({"kind": ..., ...}); one-line errors."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise InterventionConfigError(f"an intervention record needs a 'kind': got {str(data)[:80]}")
    known = kinds()
    if data["kind"] not in known:
        raise InterventionConfigError(
            f"unknown intervention kind {data['kind']!r}: this wemask knows {', '.join(known)} (upgrade wemask?)"
        )
    return known[data["kind"]].from_dict(data)


def flag_specs(everywhere: bool = False) -> list[FlagSpec]:
    """The flags the registered interventions declare: the trainers' (the remedies'), or with `everywhere` those of
    the kinds whose flags every command takes (WeMask's: mask_request.flags.MaskRequest parses them)."""
    return [spec for cls in kinds().values() if cls.everywhere == everywhere for spec in cls.flags()]


def everywhere_flags() -> dict[str, FlagSpec]:
    """{dest: FlagSpec} of the built-in kinds whose flags every command takes (WeMask's), loading no plugin (the
    commands' options are built from them when `wemask --help` runs)."""
    return {spec.dest: spec for cls in KINDS.builtins().values() if cls.everywhere for spec in cls.flags()}


def configs_from_options(options: dict) -> list[Intervention]:
    """The configs the parsed options ask for, in install order. Keys are FlagSpec.dest ('gated_norm', ...);
    missing keys mean "not given". A sub-flag without its main flag (e.g. --gated-norm-rank alone) is an error."""
    return [config for cls in kinds().values() if (config := cls.from_options(options)) is not None]
