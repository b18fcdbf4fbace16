"""Recipe YAML files: read strictly (duplicate keys are errors), every value checked against its option's type,
errors naming the key and its line."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError, first_line
from wemask_cli.train.trl_vocabulary import canonical_key


@dataclass
class Recipe:
    """A recipe's values (keys normalised to underscores) and the line each key is on."""

    path: str | None = None
    values: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)
    quoted: set = field(default_factory=set)  # keys whose value is a quoted scalar ("3": text, never a number)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"--config {self.path}" + (f" line {line}" if line else "")

    def check_type(self, key: str, value, kinds) -> None:
        """One line when `value` is not of `kinds` (booleans are never numbers, strings never booleans)."""
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if value is None:
            return
        if isinstance(value, float) and not math.isfinite(value):
            raise WeMaskError(f"{self.where(key)}: {key} must be a finite number, not {value}")
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            wanted = " or ".join(KIND_NAMES.get(kind, kind.__name__) for kind in kinds)
            raise WeMaskError(f"{self.where(key)}: {key} must be {wanted}, not {value!r} ({KIND_NAMES.get(type(value), type(value).__name__)})")


KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}


def _strict_loader():
    """yaml.SafeLoader that refuses a key given twice in one mapping (YAML keeps the last silently)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, Hashable):
                    raise yaml.constructor.ConstructorError(
                        None, None, f"a key must be a name, not a {type(key).__name__}", key_node.start_mark
                    )
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep)

    return StrictLoader


def read_recipe(path: str | None) -> Recipe:
    """The recipe at `path` (an empty one for None): a mapping of option: value."""
    if not path:
        return Recipe()
    import yaml

    file = Path(path).expanduser()
    if file.is_dir():
        raise WeMaskError(f"--config {path} is a folder: give a recipe .yaml file")
    try:
        text = file.read_text(encoding="utf-8-sig")
        root = yaml.compose(text, Loader=_strict_loader())
        _check_keys(root, path)
        data = yaml.load(text, Loader=_strict_loader())
    except FileNotFoundError:
        raise WeMaskError(f"--config {path}: no such recipe file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise WeMaskError(f"--config {path} cannot be read ({err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or first_line(err)
        raise WeMaskError(f"--config {path}{where}: not valid YAML ({problem})") from None
    if data is None:
        return Recipe(path)
    if not isinstance(data, dict):
        raise WeMaskError(f"--config {path} must be a mapping of option: value, not a {type(data).__name__}")
    lines = {canonical_key(k.value): k.start_mark.line + 1 for k, _ in root.value}
    quoted = {canonical_key(k.value) for k, v in root.value if isinstance(v, yaml.ScalarNode) and v.style in ("'", '"')}
    return Recipe(path, {canonical_key(key): value for key, value in data.items()}, lines, quoted)


def _check_keys(root, path: str) -> None:
    """The top-level keys are option names, each given once in any spelling (max_steps and max-steps are one, and so are
    TRL's model_name_or_path and model)."""
    import yaml

    if not isinstance(root, yaml.MappingNode):
        return
    seen = {}
    for key, _ in root.value:
        line = key.start_mark.line + 1
        if not isinstance(key, yaml.ScalarNode):
            kind = "list" if isinstance(key, yaml.SequenceNode) else "mapping"
            raise WeMaskError(f"--config {path} line {line}: a key must be an option name, not a {kind}")
        name = canonical_key(key.value)
        if name in seen and seen[name][0] != key.value:  # the same spelling twice: the strict loader names it
            raise WeMaskError(
                f"--config {path} line {line}: {key.value!r} repeats {seen[name][0]!r} (line {seen[name][1]}): "
                "give each option once"
            )
        seen.setdefault(name, (key.value, line))


def recipe_path(value: str, recipe: str) -> str:
    """A relative path in a recipe: from the current directory, else from the recipe's folder or the one above."""
    path = Path(value).expanduser()
    if path.is_absolute() or path.exists():
        return value
    folder = Path(recipe).expanduser().resolve().parent
    for base in (folder, folder.parent):
        if (base / path).exists():
            return str(base / path)
    return value
