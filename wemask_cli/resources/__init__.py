"""Layer 1, plumbing (ranks: tests/test_layers.py).

Data the commands read at run time, shipped inside the package and read with importlib.resources.

    locate_prompts.jsonl        `wemask locate`'s default prompts
    eval/perplexity.txt, eval/choice.jsonl, eval/math.jsonl, eval/refusal.jsonl   `wemask eval`'s bundled sets
    environments.json           the versions of `make test`'s two environments (`wemask env` compares against them)
    accelerate/*.yaml           the accelerate configs `--accelerate_config NAME` names (recipes/accelerate links here)

Written by data/generate.py (edit the generator, not the files); environments.json by `make environments`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from wemask_cli.runtime.errors import WeMaskError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def path_of(name: str) -> Traversable:
    """The bundled file `name` ('locate_prompts.jsonl', 'eval/choice.jsonl'); one line if it is missing."""
    item = resources.files(__name__)
    for part in name.split("/"):
        item = item.joinpath(part)
    if not item.is_file():
        raise WeMaskError(f"the bundled file {name} is missing from the wemask_cli package: reinstall wemask-cli")
    return item


def read_text(name: str) -> str:
    """The bundled file's text (UTF-8)."""
    return path_of(name).read_text(encoding="utf-8")


@contextmanager
def as_file(name: str) -> Iterator[Path]:
    """A real file-system path to the bundled file while the block runs (for readers that need a path)."""
    with resources.as_file(path_of(name)) as path:
        yield path


def accelerate_presets() -> dict[str, Traversable]:
    """{name: file} of the bundled accelerate configs (ddp, fsdp, zero2, zero3)."""
    folder = resources.files(__name__).joinpath("accelerate")
    return {item.name.removesuffix(".yaml"): item for item in sorted(folder.iterdir(), key=lambda item: item.name)
            if item.name.endswith(".yaml")}


def tested_environments() -> dict[str, dict]:
    """{environment name: {"about": ..., "versions": {library: version or None}}} as `make environments` recorded it."""
    return json.loads(read_text("environments.json"))["environments"]
