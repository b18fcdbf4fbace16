"""Tied weights saved once. transformers drops a tied copy (lm_head.weight, tied to the embeddings) only when the
state dict it saves shares storage; ZeRO-2 and FSDP2 hand it a gathered copy of every tensor, so the saved model
held the embedding matrix twice (the embedded model: 651 MB against 538 MB). `save_tied_once` rewrites the saved
files without the copies, as a plain save would have written them.
"""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.runtime.atomic import atomic_write, atomic_write_text

INDEX_FILE = "model.safetensors.index.json"


def tied_copies(model) -> set[str]:
    """The names of tied parameters other than the first of each group (state_dict order: the embeddings), and the
    output embeddings of a model whose config ties them (sharding may have made them two parameter objects)."""
    first: dict[int, str] = {}
    copies = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            copies.add(name)
        else:
            first[id(parameter)] = name
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if getattr(text_config, "tie_word_embeddings", False) and output is not None:
        copies.update(f"{name}.weight" for name, module in model.named_modules() if module is output)
    return copies


def save_tied_once(directory: Path, model) -> list[str]:
    """Remove the tied copies from the model*.safetensors files in `directory` (and the shard index); returns the
    names removed."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    copies = tied_copies(model)
    removed = []
    for path in sorted(Path(directory).glob("model*.safetensors")) if copies else ():
        with safe_open(path, "pt") as weights:
            found = copies & set(weights.keys())
            if not found:
                continue
            metadata = weights.metadata()
            kept = {key: weights.get_tensor(key) for key in weights.keys() if key not in found}
        atomic_write(path, lambda temporary: save_file(kept, temporary, metadata=metadata))
        removed.extend(sorted(found))
    index = Path(directory) / INDEX_FILE
    if removed and index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"] = {key: file for key, file in data.get("weight_map", {}).items() if key not in removed}
        atomic_write_text(index, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return removed
