"""What `--model` names: the embedded default, a .gguf file (converted once), a folder or a hub id, the files a
model is read from, and its hidden size read from its config without loading it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from wemask_cli.models.gguf_cache import converted_gguf_dir, embedded_model_dir
from wemask_cli.outputs import ADAPTER_CONFIG_FILE, MODEL_CONFIG_FILE
from wemask_cli.runtime.cache_dir import cache_dir
from wemask_cli.runtime.errors import WeMaskError


def resolve_source(spec: str | None) -> str:
    """Turn --model into a directory or hub id: default -> embedded dir, .gguf -> converted dir."""
    if spec in (None, "", "default"):
        return str(embedded_model_dir())
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise WeMaskError(f"--model {spec}: no such GGUF file; give an existing .gguf path, a model directory or a hub id")
        return str(converted_gguf_dir(path))
    if path.exists():
        if not path.is_dir():
            raise WeMaskError(f"--model {spec} is a file, not a model directory: give a directory, a .gguf file or a hub id")
        if not ((path / MODEL_CONFIG_FILE).is_file() or (path / ADAPTER_CONFIG_FILE).is_file()):
            raise WeMaskError(
                f"--model {spec} has no config.json or adapter_config.json: it is not a Hugging Face model directory"
            )
        return str(path)
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or os.sep + os.sep in spec
    if looks_like_path:
        raise WeMaskError(f"--model {spec}: no such directory; give an existing model directory, a .gguf file or a hub id")
    from wemask_cli.runtime.hub import before_hub_fetch

    before_hub_fetch(f"--model {spec}")
    return spec


def model_inputs(spec: str | None) -> list[tuple[str, str]]:
    """(flag, local path) of what --model reads, which no output may replace: its folder or .gguf file, a LoRA
    adapter's base folder, and wemask's cache (the embedded model, converted .gguf files, the locate cache)."""
    found = [("--model", spec)] if spec not in (None, "", "default") else []
    adapter = Path(spec).expanduser() / ADAPTER_CONFIG_FILE if found else None
    if adapter is not None and adapter.is_file():
        try:
            base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            base = None  # load_model names the problem
        found += [("the base model of --model", base)] if isinstance(base, str) else []
    return [*found, ("wemask's cache", str(cache_dir()))]


def hidden_size(spec: str | None) -> int | None:
    """The hidden size a local model (or a LoRA adapter's base) states in its config, read without its weights;
    None for a hub id or a config that does not say."""
    source = resolve_source(spec)
    adapter = Path(source) / ADAPTER_CONFIG_FILE
    if adapter.is_file():
        source = resolve_source(json.loads(adapter.read_text()).get("base_model_name_or_path") or source)
    if not (Path(source) / MODEL_CONFIG_FILE).is_file():
        return None
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError):  # load_model names the problem (code it ships runs only there, with the flag)
        return None
    return getattr(config.get_text_config(), "hidden_size", None)
