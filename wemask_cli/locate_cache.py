"""`--me-layer auto`: a fast locate per model, cached under `cache_dir()/locate/`.

The key is the model's identity and weights: its source, config, every norm weight, and the token ids of
the fast prompts (so a changed tokenizer counts too). Fine-tuning that moves the norms, or a new config,
gives a new key; a key that exists is answered from its file without running the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from .locate import encode
from .method import locate as method
from .method.arch import base_model, model_type, resolve_layers
from .models import LoadedModel, cache_dir

CACHE_VERSION = 1  # bump when the detection rule changes
FAST_PROMPTS = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the gate.",
    "def mean(values):\n    return sum(values) / len(values)",
    "Solve 3x + 7 = 22. Subtract 7 from both sides, then divide by 3, so x = 5.",
    [{"role": "user", "content": "What is the capital of France, and why is it famous?"}],
)


def cache_key(loaded: LoadedModel, token_ids: list[list[int]]) -> str:
    """A digest of the model's identity (source, config), its norm weights and the fast prompts' token ids."""
    config = getattr(base_model(loaded.model), "config", None)
    identity = {
        "version": CACHE_VERSION,
        "source": loaded.source,
        "model_type": model_type(loaded.model),
        "config": config.to_dict() if config is not None else None,
        "token_ids": token_ids,
        "rule": [method.JUMP, method.PERSIST, method.FFN_SHARE],
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    for part in resolve_layers(loaded.model):
        for norm in (part.attn_norm, part.ffn_norm, part.post_ffn_norm):
            if norm is not None:
                digest.update(norm.weight.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:32]


def cached_me_layer(loaded: LoadedModel) -> int | None:
    """The model's ME layer (None: no massive activation), located once on FAST_PROMPTS and then cached."""
    token_ids = encode(loaded.tokenizer, list(FAST_PROMPTS), max_length=128)
    path = cache_dir() / "locate" / f"{cache_key(loaded, token_ids)}.json"
    try:
        return json.loads(path.read_text())["me_layer"]
    except (OSError, ValueError, KeyError):
        pass
    result = method.locate(loaded.model, token_ids, batch_size=len(token_ids), pad_id=loaded.tokenizer.pad_token_id or 0)
    detection = result.detection
    record = {
        "me_layer": detection.me_layer,
        "confidence": detection.confidence,
        "agreement": f"{detection.agree}/{detection.total}",
        "source": loaded.source,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as file:
        json.dump(record, file)
    os.replace(staging, path)
    return detection.me_layer
