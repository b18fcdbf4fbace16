"""The TRL options a training command passes through, known without importing TRL, transformers or torch.

A mistyped flag must be refused in a second, not after the 8-40 s of heavy imports that building TRL's parser
takes: the field names are read from the config classes' source (SFTConfig, DPOConfig, GRPOConfig, their TRL
base and transformers' TrainingArguments) with `ast`, found through the packages' metadata, importing nothing.
The full check (types, values) still happens in resolve.py with TRL's own parser.
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
from functools import cache
from pathlib import Path

from ..errors import WeMaskError

SOURCES = {  # TRL config class -> (package, module file, class) chain, most derived first
    "SFTConfig": [("trl", "trainer/sft_config.py", "SFTConfig")],
    "DPOConfig": [("trl", "trainer/dpo_config.py", "DPOConfig")],
    "GRPOConfig": [("trl", "trainer/grpo_config.py", "GRPOConfig")],
}
BASES = [("trl", "trainer/base_config.py", "_BaseConfig"), ("transformers", "training_args.py", "TrainingArguments")]


def package_file(package: str, relative: str) -> Path | None:
    """A file of an installed package, found through its distribution's metadata (nothing is imported)."""
    try:
        path = Path(str(importlib.metadata.distribution(package).locate_file(package))) / relative
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def class_fields(path: Path, name: str) -> dict[str, bool]:
    """{field name: default is True} for the annotated fields in the body of class `name` in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                item.target.id: isinstance(item.value, ast.Call) and any(
                    k.arg == "default" and isinstance(k.value, ast.Constant) and k.value.value is True for k in item.value.keywords
                ) or (isinstance(item.value, ast.Constant) and item.value.value is True)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }  # fmt: skip
    return {}


@cache
def trl_flags(config: str) -> frozenset[str] | None:
    """Every spelling HfArgumentParser accepts for the TRL config class named `config` ('--learning_rate',
    '--learning-rate', '--no_bf16' for a field defaulting to True); None when its source file cannot be found or
    the class is not in SOURCES (then TRL decides)."""
    if config not in SOURCES:
        return None
    flags: set[str] = set()
    for package, relative, name in SOURCES[config] + BASES:
        path = package_file(package, relative)
        if path is None:
            return None
        for field, default_true in class_fields(path, name).items():
            names = [field] + ([f"no_{field}"] if default_true else [])
            flags.update(f"--{spelling}" for n in names for spelling in {n, n.replace("_", "-")})
    return frozenset(flags)


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
            f"No such option: {flag}{hint}; it is neither wemask's nor TRL's {config}: "
            f"see 'wemask {stage} --help' and --help-trl"
        )
