"""transformers' internals wemask touches. Verified on transformers 5.19 and 5.24.

- `PreTrainedModel._keys_to_ignore_on_save`: the state-dict keys `save_pretrained` drops. The tensors interventions
  add live in interventions.safetensors only, so model.safetensors holds the base architecture alone
  (interventions/installation.py); `save_pretrained(state_dict=...)` cannot say this for the Trainer's own saves.
- `PretrainedConfig._attn_implementation`: the attention implementation a model runs (no public getter; the
  public `set_attn_implementation` changes it), read by locate's eager-attention pass (method/collect.py).
- gpt-oss's fused experts' `_apply_gate(gate_up)`: its clamped, gated activation, which locate's per-expert ΔC
  statistics apply (method/moe.py).
- `Trainer._save_checkpoint(model, trial)`, which writes a checkpoint into `_get_output_dir(trial)`/checkpoint-N and
  rotates checkpoints there: wemask's staged saves wrap it (train/saving.py).
- `transformers.modeling_gguf_pytorch_utils.tqdm`: the bar of a GGUF load ("Converting and de-quantizing GGUF
  tensors..."), which a log receives as one line of carriage returns: a GGUF conversion shows it in a terminal only
  (models/gguf_cache.py).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from wemask_cli.compat import require

LIBRARY = "transformers"
VERIFIED = {LIBRARY: ("5.19", "5.24")}  # the release series this module was verified on, oldest and newest


def is_model(value) -> bool:
    """`value` is a transformers PreTrainedModel (False without importing transformers when it was never imported)."""
    return "transformers" in sys.modules and isinstance(value, sys.modules["transformers"].PreTrainedModel)


def ignored_on_save(model) -> set[str]:
    """The keys `model.save_pretrained` leaves out."""
    return set(require(LIBRARY, model, "_keys_to_ignore_on_save", verified=VERIFIED) or ())


def set_ignored_on_save(model, keys: set[str]) -> None:
    ignored_on_save(model)  # checked first
    model._keys_to_ignore_on_save = set(keys)


def attn_implementation(config) -> str | None:
    """The attention implementation `config` selects ('eager', 'sdpa', ...); None for a config without one."""
    if config is None:
        return None
    return require(LIBRARY, config, "_attn_implementation", verified=VERIFIED)


def apply_expert_gate(experts, gate_up):
    """A fused experts module's own activation of its gate|up projection (gpt-oss)."""
    return require(LIBRARY, experts, "_apply_gate", verified=VERIFIED)(gate_up)


def checkpoint_save(trainer):
    """The trainer's bound `_save_checkpoint`, checked to exist together with the `_get_output_dir` it writes under."""
    require(LIBRARY, type(trainer), "_get_output_dir", params=("trial",), verified=VERIFIED)
    return require(LIBRARY, trainer, "_save_checkpoint", params=("model", "trial"), verified=VERIFIED)


def stage_checkpoint_saves(trainer, save_checkpoint, output_dir) -> None:
    """The trainer saves checkpoints with `save_checkpoint(model, trial)` into `output_dir()` (and rotates there)."""
    checkpoint_save(trainer)  # checked first
    trainer._save_checkpoint = save_checkpoint
    trainer._get_output_dir = lambda trial=None: output_dir()


@contextmanager
def gguf_bar_in_terminals_only():
    """While a GGUF file loads, its tensors' bar shows only where stderr is a terminal (tqdm's `disable=None`)."""
    from functools import partial

    import transformers.modeling_gguf_pytorch_utils as gguf_loading

    bar = require(LIBRARY, gguf_loading, "tqdm", verified=VERIFIED)
    gguf_loading.tqdm = partial(bar, disable=None)
    try:
        yield
    finally:
        gguf_loading.tqdm = bar


def check() -> None:
    """What this module reads and writes is there, and `save_pretrained` still drops the keys it lists (the canary in
    tests/test_compat.py calls this)."""
    import inspect

    from transformers import LlamaConfig, PreTrainedModel, Trainer

    require(LIBRARY, PreTrainedModel, "_keys_to_ignore_on_save", verified=VERIFIED)
    if attn_implementation(LlamaConfig(attn_implementation="eager")) != "eager":
        from wemask_cli.compat import incompatible

        raise incompatible(LIBRARY, "PretrainedConfig._attn_implementation no longer reads what attn_implementation set", VERIFIED)
    if "_keys_to_ignore_on_save" not in inspect.getsource(PreTrainedModel.save_pretrained):
        from wemask_cli.compat import incompatible

        raise incompatible(LIBRARY, "PreTrainedModel.save_pretrained no longer reads _keys_to_ignore_on_save", VERIFIED)
    require(LIBRARY, Trainer, "_get_output_dir", params=("trial",), verified=VERIFIED)
    require(LIBRARY, Trainer, "_save_checkpoint", params=("model", "trial"), verified=VERIFIED)
