"""`wemask infer --engine vllm` on an ordinary, busy machine: another process holds several GiB, so less is free
than vLLM-CPU's default 92% share of the machine, and the command still runs (wemask sizes the KV cache from the
job), with only the start-up lines that matter. The command runs as users run it: its own process, no VLLM_*
variable set by the test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import psutil
import pytest
from vllm_support import require_vllm

HOLD_GIB = 4
VLLM_CPU_DEFAULT_SHARE = 0.92
INFO_LINE = re.compile(r"\bINFO \d\d-\d\d ")
HOLDER = (
    "import sys, time\n"
    f"block = bytearray({HOLD_GIB} << 30)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"  # touch every page: the memory is really held
    "print('held', flush=True)\n"
    "time.sleep(900)\n"
)


@pytest.mark.embedded
def test_infer_on_vllm_while_another_process_holds_memory(embedded_dir):
    require_vllm()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        memory = psutil.virtual_memory()
        assert memory.available < VLLM_CPU_DEFAULT_SHARE * memory.total  # vLLM's own default would refuse to start
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "WEMASK_VLLM"))}
        start = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "wemask_cli", "infer", "--engine", "vllm", "--model", embedded_dir,
             "-p", "What is the capital of France?", "--max-new-tokens", "8"],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        print(f"\ninfer --engine vllm with {memory.available / 2**30:.1f} of {memory.total / 2**30:.1f} GiB free: "
              f"{time.monotonic() - start:.0f} s")  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "Paris" in run.stdout
    info = [line for line in output.splitlines() if INFO_LINE.search(line)]
    assert len(info) <= 2, info  # vLLM's ~35 INFO start-up lines stay quiet (VLLM_LOGGING_LEVEL is the user's)
