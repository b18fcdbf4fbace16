"""The libraries' warnings wemask quiets, only while one of its commands runs (cli.main), never for the whole process.

Their deprecation notices (FutureWarning) are not the user's doing, and under a launcher the main process speaks for
all, so the other processes' warnings are off too. The filters match where a warning is raised from (its module),
so a warning attributed to the user's own code (a reward function calling a deprecated API) still shows; everything
is restored when the command returns.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "huggingface_hub", "safetensors",
             "bitsandbytes", "deepspeed", "lm_eval", "vllm", "wemask_cli")
FROM_LIBRARIES = rf"({'|'.join(LIBRARIES)})(\.|$)"  # warnings.filterwarnings matches it at the module's start


@contextmanager
def library_notices_quiet(every_warning: bool = False) -> Iterator[None]:
    """FutureWarnings raised from the libraries' code off while the block runs; with `every_warning` (a process other
    than the main one) every warning off."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=FROM_LIBRARIES)
        if every_warning:
            warnings.filterwarnings("ignore")
        yield
