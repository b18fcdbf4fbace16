"""The TRL options a training command passes through, known in a second: a mistyped flag is refused before the
8-40 s of heavy imports a run starts with.

The spellings come from TRL's public config dataclasses (`dataclasses.fields` of SFTConfig, DPOConfig, GRPOConfig,
... with the transformers TrainingArguments fields they inherit), read once per installed trl and transformers
release and kept in the cache folder (trl-flags/); later runs read that file and import nothing. A command whose
file is missing imports the config class (what its run does next anyway). When TRL cannot be imported, or the stage
names a class TRL does not have, this check steps aside and TRL's own parser (resolve.py) decides.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from functools import cache

from wemask_cli.runtime.atomic import atomic_write_text
from wemask_cli.runtime.cache_dir import cache_dir
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.versions import library_versions
from wemask_cli.train.stage_registry import resolve

LIBRARIES = ("trl", "transformers")  # whose releases the cached spellings depend on


def spellings(config_class: type) -> frozenset[str]:
    """Every spelling HfArgumentParser accepts for the fields of `config_class` ('--learning_rate',
    '--learning-rate', and '--no_bf16' / '--no-bf16' for a field defaulting to True)."""
    flags: set[str] = set()
    for field in dataclasses.fields(config_class):
        if not field.init:
            continue
        names = [field.name] + ([f"no_{field.name}"] if field.default is True else [])
        flags.update(f"--{spelling}" for name in names for spelling in {name, name.replace("_", "-")})
    return frozenset(flags)


def class_name(config: str) -> str:
    """'SFTConfig' of the stage's 'trl:SFTConfig'."""
    return config.rpartition(":")[2]


def cached_file(config: str):
    versions = library_versions(LIBRARIES)
    if None in versions.values():
        return None
    release = "-".join(f"{name}{version}" for name, version in versions.items())
    return cache_dir() / "trl-flags" / f"{class_name(config)}-{release}.json"


@cache
def trl_flags(config: str) -> frozenset[str] | None:
    """The spellings of TRL's config class `config` ('trl:SFTConfig'), from the cache file of the installed releases when there
    is one; None when trl is missing, cannot be imported, or has no such class (then TRL decides)."""
    path = cached_file(config)
    if path is None:
        return None
    try:
        return frozenset(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass  # not written yet (or unreadable): read from TRL below
    try:
        config_class = resolve(config)
    except (ImportError, AttributeError):
        return None
    flags = spellings(config_class)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(sorted(flags)))
    except OSError:
        pass  # a read-only cache: known for this run only
    return flags


def check_extra_args(args: list[str], stage: str, config: str, own_flags: list[str]) -> None:
    """Refuse a flag that is neither wemask's nor TRL's `config` class's, with the closest spellings; values are not
    checked here."""
    known = trl_flags(config)
    if known is None:
        return
    for token in args:
        flag = token.split("=", 1)[0]
        if not flag.startswith("--") or flag == "--" or flag in known or flag in own_flags:
            continue
        close = difflib.get_close_matches(flag, [*own_flags, *(f for f in known if "_" not in f)], n=3, cutoff=0.75)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise WeMaskError(
            f"No such option: {flag}{hint}; it is neither wemask's nor TRL's {class_name(config)}: "
            f"see 'wemask {stage} --help' and --help-trl"
        )


TRUE_WORDS, FALSE_WORDS = ("yes", "true", "t", "y", "1"), ("no", "false", "f", "n", "0")  # HfArgumentParser's booleans


def given_bool(args: list[str], field: str) -> bool | None:
    """The boolean TRL option `field` as TRL's parser reads `args` (a bare flag is true, the last one given wins);
    None when it is not given or its value is no boolean (TRL's parser refuses that)."""
    value = None
    for index, token in enumerate(args):
        flag, equals, word = token.partition("=")
        if flag.lstrip("-").replace("-", "_") != field or not flag.startswith("--"):
            continue
        if not equals:
            following = args[index + 1] if index + 1 < len(args) else ""
            word = following if following.lower() in TRUE_WORDS + FALSE_WORDS else "true"
        value = True if word.lower() in TRUE_WORDS else False if word.lower() in FALSE_WORDS else None
    return value
