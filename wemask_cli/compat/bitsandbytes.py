"""bitsandbytes' internals wemask reads (verified on bitsandbytes 0.50.2): its CPU notice, "Failed to load CPU
gemm_4bit_forward from kernels-community: ...", logged (a warning of the logger `bitsandbytes.backends.cpu.ops`)
each time bitsandbytes is imported on a CPU with AVX512-BF16 and without the `kernels` package, which peft and
transformers do whether or not anything is 4-bit. compat/notices.py filters exactly that message (other
bitsandbytes warnings pass); where wemask loads 4-bit weights on the CPU, `four_bit_kernel_line()` says in one line which kernel
runs instead, read from the module variable `bitsandbytes.backends.cpu.ops.gemm_4bit_forward_kernel` (defined only
on CPUs with AVX512-BF16; its module is checked to be the one that logs the notice). Torch-free; imports nothing of
bitsandbytes.
"""

from __future__ import annotations

import sys

from wemask_cli.compat import incompatible

LIBRARY = "bitsandbytes"
VERIFIED = {LIBRARY: ("0.50", "0.50")}  # the release series this module was verified on
NOTICE_LOGGER = "bitsandbytes.backends.cpu.ops"
NOTICE_START = "Failed to load CPU gemm_4bit_forward from kernels-community"


def four_bit_kernel_line() -> str:
    """Which kernel computes 4-bit matmuls on the CPU (call once bitsandbytes is imported); a CompatError when its
    CPU back-end is no longer the module that logs the notice."""
    ops = sys.modules.get(NOTICE_LOGGER)
    if ops is None:
        raise incompatible(LIBRARY, f"the CPU back-end {NOTICE_LOGGER} was not imported with bitsandbytes", VERIFIED)
    if not hasattr(ops, "gemm_4bit_forward_kernel"):  # a CPU without AVX512-BF16: bitsandbytes never tries it
        return "4-bit on CPU: bitsandbytes' own CPU kernel"
    if ops.gemm_4bit_forward_kernel is None:
        return ("4-bit on CPU: bitsandbytes' own CPU kernel (kernels-community's faster gemm_4bit_forward needs "
                "`pip install 'kernels>=0.11.1'`)")
    return "4-bit on CPU: kernels-community's gemm_4bit_forward kernel"


def check() -> None:
    """The canary (tests/test_compat.py): importing bitsandbytes imports the CPU back-end that logs the notice."""
    import bitsandbytes  # noqa: F401

    four_bit_kernel_line()
