"""A model's tensors read for the one finiteness check (runtime/finite.py): a loaded model's parameters, a weight file,
and the weight files of a model folder in every format transformers and vLLM load (safetensors, .bin, .pt)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError, first_line
from wemask_cli.runtime.finite import NonFiniteWeights, first_non_finite, refusal, require_finite


def require_finite_file(path: Path) -> None:
    """Refuse a safetensors file (a LoRA adapter, ...) holding a non-finite tensor; a missing file is left to its reader."""
    if not path.is_file():
        return
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise WeMaskError(f"{path} cannot be read ({first_line(err, 120)}): it is truncated or damaged; save it again or "
                          "restore it from a copy") from None
    require_finite(tensors, str(path))


def require_finite_model(model, weights_from: str) -> None:
    """Refuse a loaded model with a non-finite parameter, naming the checkpoint file that holds it."""
    name = first_non_finite(model.named_parameters())
    if name is not None:
        raise NonFiniteWeights(refusal(_file_holding(weights_from, name), name))


def require_finite_folder(folder: str | Path) -> None:
    """Refuse a model folder whose weight files (every format weight_files finds) hold NaN or infinity, with the
    loaded model's line (refusal), before an engine that reads the files itself (vLLM) serves them."""
    for path in weight_files(folder):
        name = first_non_finite(tensors_of(path))
        if name is not None:
            raise NonFiniteWeights(refusal(str(path), name))


# the formats vLLM and transformers load a model folder's weights from, in their order: the first one present is loaded
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
TRAINER_STATE_FILES = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")  # not weights


def weight_files(folder: str | Path) -> list[Path]:
    """The files a model folder's weights load from: its safetensors, else its .bin, else its .pt files (a trainer's
    state files left out); none for a hub id."""
    for pattern in WEIGHT_PATTERNS if Path(folder).is_dir() else ():
        found = sorted(path for path in Path(folder).glob(pattern) if path.name not in TRAINER_STATE_FILES)
        if found:
            return found
    return []


def tensors_of(path: Path) -> Iterator[tuple[str, object]]:
    """The (name, tensor) pairs of a weight file, read one at a time (a .bin or .pt state dict memory-mapped); a file
    that cannot be read is one line."""
    import pickle

    from safetensors import SafetensorError, safe_open

    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (a safe_open handle is not a mapping)
                    yield key, handle.get_tensor(key)
        else:
            yield from _state_dict(path).items()
    except (SafetensorError, OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        if "Unsupported global" in str(err):  # torch's weights-only loading met a class
            raise WeMaskError(f"{path} holds Python objects besides tensors, which torch loads only from a trusted file "
                              "(vLLM and transformers load weights only): save the model again with save_pretrained") from None
        raise WeMaskError(f"{path} cannot be read ({first_line(err, 120)}): it is truncated or damaged; save it again or "
                          "restore it from a copy") from None


def _state_dict(path: Path) -> dict:
    """The tensors of a .bin or .pt file as transformers and vLLM load it (torch.load, weights only)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # a file of torch's legacy format cannot be memory-mapped
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise WeMaskError(f"{path} holds a {type(state).__name__}, not a state dict of tensors: it is not a model's weights "
                          "file; move it out of the model folder")
    return {name: tensor for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}


def _names_in(path: Path) -> list[str]:
    if path.suffix != ".safetensors":
        return list(_state_dict(path))
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return list(handle.keys())


def _file_holding(source: str, name: str) -> str:
    """The weight file of a model directory that holds tensor `name` (the directory or hub id when none does)."""
    if not Path(source).is_dir():
        return f"model {source}"
    return next((str(path) for path in weight_files(source) if name in _names_in(path)), str(source))
