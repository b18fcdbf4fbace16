"""bitsandbytes' CPU notice, "Failed to load CPU gemm_4bit_forward from kernels-community: ...", logged (a warning
of the logger `bitsandbytes.backends.cpu.ops`) each time bitsandbytes is imported on a CPU with AVX512-BF16 and
without the `kernels` package, which peft and transformers do whether or not anything is 4-bit. `drop_notice()`
filters exactly that message (other bitsandbytes warnings pass); where wemask loads 4-bit weights on the CPU,
`four_bit_kernel_line()` says in one line which kernel runs instead. Torch-free; imports nothing of bitsandbytes.
"""

from __future__ import annotations

import logging
import sys

NOTICE_LOGGER = "bitsandbytes.backends.cpu.ops"
NOTICE_START = "Failed to load CPU gemm_4bit_forward from kernels-community"
# Start-up lines of other libraries that say nothing about the run, by logger: DeepSpeed's accelerator fallback,
# printed whenever transformers or accelerate import DeepSpeed to ask whether it is there, DeepSpeed used or not.
NOTICES = {NOTICE_LOGGER: NOTICE_START, "DeepSpeed": "Setting accelerator to CPU. If you have GPU or other accelerator"}


class _DropNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOTICES.get(record.name, "\0"))


_FILTER = _DropNotice()


def drop_notice() -> None:
    """Filter those notices (before or after their library is imported: a logger keeps its filters)."""
    for name in NOTICES:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def keep_notices() -> None:
    """`wemask -v`: every library line shown again."""
    for name in NOTICES:
        logging.getLogger(name).removeFilter(_FILTER)


def four_bit_kernel_line() -> str:
    """Which kernel computes 4-bit matmuls on the CPU (call once bitsandbytes is imported)."""
    ops = sys.modules.get(NOTICE_LOGGER)
    if ops is None or not hasattr(ops, "gemm_4bit_forward_kernel"):
        return "4-bit on CPU: bitsandbytes' own CPU kernel"
    if ops.gemm_4bit_forward_kernel is None:
        return ("4-bit on CPU: bitsandbytes' own CPU kernel (kernels-community's faster gemm_4bit_forward needs "
                "`pip install 'kernels>=0.11.1'`)")
    return "4-bit on CPU: kernels-community's gemm_4bit_forward kernel"
