"""The release series every compat module declares it was verified on (its `VERIFIED`), gathered into one table that
runtime/tested.py measures installed versions against, beside the tested environments. Imports no library."""

from __future__ import annotations

from wemask_cli.compat import accelerate, bitsandbytes, datasets, huggingface_hub, lm_eval, transformers, vllm
from wemask_cli.compat import argparse as standard_library

MODULES = (accelerate, standard_library, bitsandbytes, datasets, huggingface_hub, lm_eval, transformers, vllm)


def verified_ranges() -> dict[str, tuple[str, str]]:
    """{library: (oldest, newest release series)} over every compat module's VERIFIED."""
    return {library: span for module in MODULES for library, span in module.VERIFIED.items()}
