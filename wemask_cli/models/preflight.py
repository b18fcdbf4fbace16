"""What --model names, checked before torch or transformers are imported: a hub id with the hub offline and no
cached copy, and a layer index (--me-layer) against the layers its config.json states (read as JSON, where it is at
hand: a folder, a LoRA adapter's base folder, a converted .gguf or embedded model, a hub id in the cache)."""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.models.gguf_cache import converted_path, embedded_gguf_path
from wemask_cli.models.names import model_label
from wemask_cli.models.sources import resolve_source
from wemask_cli.outputs import ADAPTER_CONFIG_FILE, MODEL_CONFIG_FILE
from wemask_cli.runtime.errors import WeMaskError

DEFAULT_SPECS = (None, "", "default")


def check_model(spec: str | None, me_layer=None) -> None:
    """`check_model_source`, then `check_layer_index` for --me-layer: what a command checks of --model first."""
    check_model_source(spec)
    check_layer_index(me_layer, spec)


def check_model_source(spec: str | None) -> None:
    """A folder without a model's config, a missing path, or a hub id that cannot be fetched (the hub offline and no
    copy in its cache): one line. The embedded model and .gguf files are left to the load (converted once there)."""
    if spec in DEFAULT_SPECS or str(spec).endswith(".gguf"):
        return
    from wemask_cli.runtime.hub import offline_without_copy

    source = resolve_source(spec)
    if not Path(source).exists() and offline_without_copy(f"--model {spec}", source):
        raise WeMaskError(
            f"could not load model {spec!r}: it is not in the Hugging Face cache and the hub is offline (HF_HUB_OFFLINE=1, "
            "or not reachable); pass a local model directory or .gguf file, omit --model for the embedded "
            "SmolLM2-135M-Instruct, or run once with network access to fill the cache"
        )


def config_folder(spec: str | None) -> Path | None:
    """The folder whose config.json describes the model `spec` names, where it is at hand without loading or
    converting anything; None otherwise."""
    if spec in DEFAULT_SPECS or str(spec).endswith(".gguf"):
        try:
            gguf = embedded_gguf_path() if spec in DEFAULT_SPECS else Path(str(spec)).expanduser()
            folder = converted_path(gguf)
        except (WeMaskError, OSError):  # not installed, no such file: the load says so
            return None
    elif Path(spec).expanduser().is_dir():
        folder = Path(spec).expanduser()
        base = _adapter_base(folder)
        if base is not None:
            return config_folder(base) if base != spec else None
    else:
        folder = _cached_hub_folder(spec)
    return folder if folder is not None and (folder / MODEL_CONFIG_FILE).is_file() else None


def _adapter_base(folder: Path) -> str | None:
    try:
        base = json.loads((folder / ADAPTER_CONFIG_FILE).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return base if isinstance(base, str) else None


def _cached_hub_folder(spec: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(spec, MODEL_CONFIG_FILE)
    except ValueError:  # not a valid hub id
        return None
    return Path(found).parent if isinstance(found, str) else None


def layer_count(spec: str | None) -> int | None:
    """num_hidden_layers of the model `spec` names (its text model's, for a multimodal one), None where unknown."""
    folder = config_folder(spec)
    if folder is None:
        return None
    try:
        config = json.loads((folder / MODEL_CONFIG_FILE).read_text())
        layers = (config.get("text_config") or config).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return None
    return layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else None


def check_layer_index(layer, spec: str | None, flag: str = "--me-layer", auto: bool = True) -> None:
    """A 0-based layer index (`flag`'s value; 'auto' and None pass) inside the model `spec` names, where its config
    is at hand (`auto`: the flag also takes 'auto', and the message says so)."""
    if not isinstance(layer, int) or isinstance(layer, bool):
        return
    count = layer_count(spec)
    if count is not None and layer >= count:
        name = model_label(config_folder(spec)) if spec in DEFAULT_SPECS else spec
        raise WeMaskError(f"{flag} {layer} is outside {name}: it has {count} layers, use 0..{count - 1} (0-based)" + (" or auto" if auto else ""))
