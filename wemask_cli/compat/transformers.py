"""The Trainer internals wemask's staged saves use (train/saving.py): `_save_checkpoint(model, trial)`, which writes a
checkpoint into `_get_output_dir(trial)`/checkpoint-N and rotates checkpoints there. Verified on transformers 5.19
and 5.24."""

from __future__ import annotations

from . import require

VERIFIED = "5.19-5.24"


def checkpoint_save(trainer):
    """The trainer's bound `_save_checkpoint`, checked to exist together with the `_get_output_dir` it writes under."""
    require("transformers", type(trainer), "_get_output_dir", params=("trial",), verified=VERIFIED)
    return require("transformers", trainer, "_save_checkpoint", params=("model", "trial"), verified=VERIFIED)
