"""What precision a run really trained in, observed rather than inferred from `mixed_precision`, for wemask_run.json:

- weights: the dtype(s) of the trainable parameters the forward uses (DeepSpeed casts them to bf16; DDP and FSDP
  keep float32 and compute in bf16 under autocast / FSDP's mixed-precision policy);
- master: the dtype(s) of the tensors the optimizer updates (DeepSpeed's ZeRO optimizer keeps float32 partitions of
  bf16 weights; elsewhere the optimizer updates the weights themselves);
- activations: the dtype(s) the first linear layer of the model computed in during the first step;
- saved: the dtype(s) of the floating tensors in the weight files written next to the record.

`mixed_precision: bf16` thus reads as two runs: DDP and FSDP train float32 weights (saved float32), DeepSpeed ZeRO
trains and saves bf16 weights (with float32 masters); a ZeRO run says so in one line after its first step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import TrainerCallback

from wemask_cli.runtime.progress import say

SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}


def dtype_names(tensors) -> list[str]:
    return sorted({str(tensor.dtype).removeprefix("torch.") for tensor in tensors})


def saved_dtypes(directory: Path) -> list[str]:
    """The floating dtypes of the weight files in `directory` (model*.safetensors, adapter_model.safetensors),
    read from their headers; [] when none is there yet."""
    from safetensors import safe_open

    found = set()
    for path in sorted(directory.glob("*.safetensors")):
        if not path.name.startswith(("model", "adapter_model")):
            continue
        with safe_open(path, "pt") as weights:
            found.update(SAFETENSORS_DTYPES.get(weights.get_slice(key).get_dtype()) for key in weights.keys())
    return sorted(found - {None})


def first_linear(model: torch.nn.Module) -> torch.nn.Module | None:
    """The first linear layer of the decoder (a LoRA layer's base layer; bitsandbytes layers are nn.Linear too)."""
    return next((m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name
                 and "lora_" not in name), None)


class PrecisionProbe(TrainerCallback):
    """Observes the weights' dtypes when training starts, the activations' during the first step and the master
    copy's after it; `facts(directory)` adds the saved files' dtypes."""

    def __init__(self):
        self.weights: list[str] = []
        self.master: list[str] = []
        self.activations: set[str] = set()
        self.handle = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        self.weights = dtype_names(p for p in model.parameters() if p.requires_grad)
        linear = first_linear(model)
        if linear is not None and self.handle is None and not self.master:
            self.handle = linear.register_forward_hook(lambda module, inputs, output: self.activations.add(
                str(output.dtype).removeprefix("torch.")))

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        """After the first optimizer step: the tensors its state is kept for are the master copy (ZeRO-3 empties its
        param_groups between steps)."""
        if self.master:
            return
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        if optimizer is not None:
            keys = [key for key in optimizer.state.keys() if isinstance(key, torch.Tensor)]
            self.master = dtype_names(keys or [p for group in optimizer.param_groups for p in group["params"]])
        self.announce_deepspeed(args)

    def announce_deepspeed(self, args) -> None:
        """The one line that tells a ZeRO run from a DDP/FSDP run of the same `mixed_precision`."""
        plugin = getattr(args, "deepspeed_plugin", None)
        if plugin is None or self.weights in ([], ["float32"]):
            return
        stage = plugin.zero_stage
        masters = ", ".join(self.master) or "unknown"
        say(f"DeepSpeed ZeRO-{stage} trains and saves {', '.join(self.weights)} weights (the optimizer's master copy: "
            f"{masters}); DDP and FSDP with the same mixed_precision keep float32 weights and compute in bf16")

    def facts(self, directory: Path) -> dict:
        """The record's `dtypes`: each a sorted list of dtype names ([] where not observed)."""
        return {"weights": self.weights, "master": self.master, "activations": sorted(self.activations),
                "saved": saved_dtypes(Path(directory))}
