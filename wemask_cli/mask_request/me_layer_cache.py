"""`--me-layer auto`: a fast locate per model, cached under `cache_dir()/locate/`.

The key is the model's identity and weights: its source, config, the token ids of the fast prompts (so a
changed tokenizer counts too), the names, sizes and mtimes of the weight files in its local directories (the
source and, for an adapter, its base), and a fingerprint of the parameters in memory (see `fingerprint`). A
retrain in place, a new config or new weights give a new key; a key that exists is answered from its file
without running the model.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from torch import nn

from wemask_cli.method import locate as method
from wemask_cli.method.arch import base_model, decoder_layers, model_type
from wemask_cli.models.loading import LoadedModel
from wemask_cli.prompts.rendering import encode
from wemask_cli.runtime.atomic import atomic_write_text
from wemask_cli.runtime.cache_dir import cache_dir
from wemask_cli.runtime.progress import warn

CACHE_VERSION = 1  # bump when the detection rule changes
FAST_PROMPTS = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the gate.",
    "def mean(values):\n    return sum(values) / len(values)",
    "Solve 3x + 7 = 22. Subtract 7 from both sides, then divide by 3, so x = 5.",
    [{"role": "user", "content": "What is the capital of France, and why is it famous?"}],
)


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
SAMPLE = 4096  # values per parameter in the fingerprint: smaller tensors (the norms) whole


def weight_files(directories: list[str]) -> list[list]:
    """[directory, name, size, mtime_ns] of each weight file (weights, adapters) directly in these local directories."""
    found = []
    for directory in sorted({Path(d).resolve() for d in directories if d and Path(d).is_dir()}):
        for path in sorted({p for pattern in WEIGHT_FILES for p in directory.glob(pattern)}):
            stat = path.stat()
            found.append([str(directory), path.name, stat.st_size, stat.st_mtime_ns])
    return found


def fingerprint(model: nn.Module, digest) -> None:
    """Feed `digest` every parameter's name, shape and values: whole up to SAMPLE values, else a strided sample."""
    for name, param in model.named_parameters():
        flat = param.detach().reshape(-1)
        sample = flat[:: max(1, math.ceil(flat.numel() / SAMPLE))]
        digest.update(f"{name}:{tuple(param.shape)}".encode())
        digest.update(sample.float().cpu().numpy().tobytes())


def cache_key(loaded: LoadedModel, token_ids: list[list[int]]) -> str:
    """A digest of the model's identity (source, config), weight files, parameters and the fast prompts' token ids."""
    config = getattr(base_model(loaded.model), "config", None)
    identity = {
        "version": CACHE_VERSION,
        "source": loaded.source,
        "model_type": model_type(loaded.model),
        "config": config.to_dict() if config is not None else None,
        "token_ids": token_ids,
        "rule": [method.JUMP, method.PERSIST, method.FFN_SHARE],
        "weight_files": weight_files([loaded.source, getattr(config, "name_or_path", "")]),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    fingerprint(loaded.model, digest)
    return digest.hexdigest()[:32]


def entry_check(key: str, me_layer) -> str:
    """The digest a cache entry carries of its key and answer: an entry edited by hand no longer matches it."""
    return hashlib.sha256(f"{key}:{me_layer!r}".encode()).hexdigest()[:16]


def read_entry(path: Path, key: str, layers: int) -> tuple[bool, int | None]:
    """(found, ME layer) of a cache file; an entry that is not one wemask wrote for this key (edited, torn, out of
    range) is ignored with a warning naming the file (the caller locates again and replaces it)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError):
        record = None
    layer = record.get("me_layer") if isinstance(record, dict) else "?"
    valid = layer is None or (isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < layers)
    if valid and isinstance(record, dict) and record.get("check") == entry_check(key, layer):
        return True, layer
    warn(f"--me-layer auto: ignoring the locate cache entry {path} (me_layer {layer!r} is not what wemask recorded for "
         f"this model of {layers} layers): locating again")
    return False, None


def locate_prompt_ids(loaded: LoadedModel) -> list[list[int]]:
    """The token ids of the fast locate prompts (FAST_PROMPTS) in this model's tokenizer and chat template."""
    return encode(loaded.tokenizer, list(FAST_PROMPTS), max_length=128)


def cached_me_layer(loaded: LoadedModel) -> int | None:
    """The model's ME layer (None: no massive activation), located once on FAST_PROMPTS and then cached."""
    token_ids = locate_prompt_ids(loaded)
    key = cache_key(loaded, token_ids)
    path = cache_dir() / "locate" / f"{key}.json"
    found, layer = read_entry(path, key, len(decoder_layers(loaded.model)))
    if found:
        return layer
    result = method.locate(loaded.model, token_ids, batch_size=len(token_ids), pad_id=loaded.tokenizer.pad_token_id or 0)
    detection = result.detection
    record = {
        "me_layer": detection.me_layer,
        "confidence": detection.confidence,
        "agreement": f"{detection.agree}/{detection.total}",
        "source": loaded.source,
        "check": entry_check(key, detection.me_layer),
    }
    atomic_write_text(path, json.dumps(record))
    return detection.me_layer
