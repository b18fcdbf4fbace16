"""`wemask vllm-serve` (TRL's vLLM server with WeMask in every worker) and `wemask grpo --vllm-mode server`.

On CPU: the server starts from the CLI, its completions through TRL's own VLLMClient (the calls GRPO's server mode
makes) are the masked greedy completions of the transformers hooks, which colocate's rollouts equal
(tests/test_grpo_vllm.py); a trainer's install over /collective_rpc sets the same dims in every worker; GRPO
refuses server mode on CPU in one line naming the GPU requirement (the weight sync is NCCL). With CUDA, a GRPO run
in server mode trains against the server (skipped only where torch.cuda.is_available() is false).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_main
from vllm_support import ME_LAYER, free_port, require_vllm, start_server, stop_server

from wemask_cli.method.config import WeMaskConfig

ROOT = Path(__file__).resolve().parents[1]
MATH = str(ROOT / "data" / "math_problems.jsonl")
PROMPTS = ["What is 12 plus 30?", "The capital of France is", "Natalia sold 48 clips in April. In May she sold"]
NEW_TOKENS = 10


def hooked_greedy(embedded, config: WeMaskConfig | None) -> list[list[int]]:
    """Greedy completions of the transformers model with `config`'s hooks (None: unmasked), to the first EOS."""
    from wemask_cli.method.wemask_hook import apply_wemask

    eos, found = embedded.tokenizer.eos_token_id, []
    with apply_wemask(embedded.model, config or WeMaskConfig()), torch.no_grad():
        for text in PROMPTS:
            ids = embedded.tokenizer(text, return_tensors="pt").input_ids
            out = embedded.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos, pad_token_id=eos)
            found.append(out[0, ids.shape[1]:].tolist())
    return found


def client_greedy(client, embedded) -> list[list[int]]:
    """Greedy completions from the server through TRL's VLLMClient (GRPO's server-mode call), to the first EOS."""
    prompts = [embedded.tokenizer(text)["input_ids"] for text in PROMPTS]
    completions = client.generate(prompts, temperature=0.0, max_tokens=NEW_TOKENS)["completion_ids"]
    eos = embedded.tokenizer.eos_token_id
    return [c[: c.index(eos) + 1] if eos in c else c for c in completions]


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedded_dir):
    """`wemask vllm-serve --mask-rate 1 --me-layer 11` on the embedded model (CPU: 1 worker)."""
    require_vllm()
    log = tmp_path_factory.mktemp("server") / "serve.log"
    process, url = start_server(embedded_dir, log, "--mask-rate", "1", "--me-layer", str(ME_LAYER))
    try:
        yield url, log
    finally:
        stop_server(process)


def test_server_completions_are_the_masked_greedy_ones(server, embedded):
    """Started with --mask-rate 1: each worker's plugin installed it; TRL's client gets the masked tokens."""
    from trl.generation.vllm_client import VLLMClient

    url, log = server
    masked = WeMaskConfig(mask_rate=1.0, me_layer=ME_LAYER)
    assert client_greedy(VLLMClient(base_url=url), embedded) == hooked_greedy(embedded, masked), log.read_text()[-2000:]
    assert hooked_greedy(embedded, masked) != hooked_greedy(embedded, None)  # the mask matters for these prompts
    text = log.read_text()
    assert "wemask: serving" in text and "r=1 at layers 11+" in text and "wemask: WeMask in vLLM: r=1" in text
    assert "the weight sync of `wemask grpo --vllm-mode server` needs GPUs" in text


def test_a_trainer_installs_its_recorded_dims_in_every_worker(server, embedded):
    """GRPO's server-mode install: the trained model's config, its dims recorded by the hooks, goes to every worker
    over /collective_rpc; no mask (free mode) gives the unmasked tokens; a partial mask its own."""
    from trl.generation.vllm_client import VLLMClient

    from wemask_cli.engines.vllm.server import install_on_server
    from wemask_cli.method.wemask_hook import apply_wemask

    url, _ = server
    client = VLLMClient(base_url=url)
    with apply_wemask(embedded.model, WeMaskConfig(mask_rate=0.5, me_layer=ME_LAYER, mode="aware")) as handle:
        half = handle.config
    try:
        held = install_on_server(url, half)
        assert held and all(worker == {str(layer): dims for layer, dims in half.dims.items()} for worker in held)
        client.reset_prefix_cache()
        assert client_greedy(client, embedded) == hooked_greedy(embedded, half)
        assert install_on_server(url, None) == [{}] * len(held)
        client.reset_prefix_cache()
        assert client_greedy(client, embedded) == hooked_greedy(embedded, None)
    finally:
        install_on_server(url, WeMaskConfig(mask_rate=1.0, me_layer=ME_LAYER))


def test_grpo_server_mode_on_cpu_is_one_line_naming_the_gpu_requirement(server, monkeypatch, capsys, tmp_path):
    """A reachable server on a CPU machine: TRL's weight sync needs NCCL (init_communicator refuses a non-CUDA
    device), so GRPO stops before the model loads."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: server mode runs (test_grpo_server_mode_trains_with_the_mask_on_gpu)")
    url, _ = server
    out = tmp_path / "grpo"
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--dataset", MATH, "--output-dir", str(out), "--use-vllm",
                            "--vllm-mode", "server", "--vllm-server-base-url", url, "--mask-rate", "1", "--me-layer", "11")  # fmt: skip
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "--vllm-mode server needs GPUs: TRL syncs the trained weights to the vLLM server over NCCL" in err
    assert not out.exists()


def test_no_server_at_the_address_is_one_line_after_the_timeout():
    """What `wemask grpo --vllm-mode server` says (with CUDA; on CPU the GPU line comes first) when nothing answers."""
    from wemask_cli.engines.vllm.server import wait_for_server
    from wemask_cli.runtime.errors import WeMaskError

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(WeMaskError) as caught:
        wait_for_server(url, 1)
    assert str(caught.value) == (
        f"--vllm-mode server: no vLLM server answers at {url} (waited 1 s, --vllm-server-timeout): start one with "
        "`wemask vllm-serve --model MODEL` and pass its address (--vllm-server-base-url), or use --vllm-mode colocate"
    )


def test_grpo_server_mode_without_a_server_is_one_line_on_gpu(monkeypatch, capsys, tmp_path):
    require_vllm()
    if not torch.cuda.is_available():
        pytest.skip("on CPU server mode is refused first (the GPU line, tested above)")
    out, url = tmp_path / "grpo", f"http://127.0.0.1:{free_port()}"
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--dataset", MATH, "--output-dir", str(out), "--use-vllm",
                            "--vllm-mode", "server", "--vllm-server-base-url", url, "--vllm-server-timeout", "1")  # fmt: skip
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert f"--vllm-mode server: no vLLM server answers at {url} (waited 1 s, --vllm-server-timeout)" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm-serve", "--tensor-parallel-size", "4096"], "--tensor-parallel-size 4096 x --data-parallel-size 1 needs 4096 workers"),
        (["vllm-serve", "--data-parallel-size", "0"], "--data-parallel-size 0 is not valid"),
        (["vllm-serve", "--mask-rate", "0,0.3", "--me-layer", "11"], "one server serves one mask"),
        (["infer", "--engine", "vllm", "-p", "Hi", "--tensor-parallel-size", "4096"], "needs 4096 workers but this machine has"),
        (["infer", "--engine", "vllm", "-p", "Hi", "--data-parallel-size", "2"], "use `wemask vllm-serve --data-parallel-size N`"),
        (["infer", "-p", "Hi", "--tensor-parallel-size", "2"], "the transformers engine runs one process: use --engine vllm"),
    ],
)
def test_parallel_sizes_it_cannot_run_are_one_line_before_vllm_starts(monkeypatch, capsys, embedded_dir, argv, expected):
    require_vllm()
    code, _, err = run_main(monkeypatch, capsys, *argv, "--model", embedded_dir)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1 and expected in err, err


def test_eval_with_too_many_workers_leaves_no_folder(monkeypatch, capsys, tmp_path, embedded_dir):
    require_vllm()
    out = tmp_path / "eval"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--engine", "vllm", "--model", embedded_dir, "--task", "perplexity",
                            "--limit", "2", "-o", str(out), "--tensor-parallel-size", "4096")  # fmt: skip
    assert code == 2 and "Traceback" not in err and "needs 4096 workers" in err, err
    assert not out.exists()


def test_grpo_server_mode_trains_with_the_mask_on_gpu(tmp_path, embedded_dir):
    """With CUDA: `wemask vllm-serve` on the last GPU, `wemask grpo --vllm-mode server` (aware r = 1) on the first;
    TRL syncs the weights over NCCL each step (the run fails otherwise); the server's workers end holding the
    trained model's recorded dims (the weight sync loads parameters and leaves the mask's buffers)."""
    require_vllm()
    if not torch.cuda.is_available():
        pytest.skip("server mode's weight sync is NCCL: it needs CUDA (on CPU, see the one-line refusal above)")
    from wemask_cli.engines.vllm.server import post

    last = str(torch.cuda.device_count() - 1)
    log = tmp_path / "serve.log"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", last)
        process, url = start_server(embedded_dir, log, "--mask-rate", "1", "--me-layer", str(ME_LAYER), "--vllm-memory", "0.3")
    try:
        out = tmp_path / "grpo"
        run = subprocess.run(
            [sys.executable, "-m", "wemask_cli", "grpo", "--model", embedded_dir, "--dataset", MATH, "--output-dir", str(out),
             "--use-vllm", "--vllm-mode", "server", "--vllm-server-base-url", url, "--mask-rate", "1", "--me-layer", str(ME_LAYER),
             "--mode", "aware", "--max-steps", "2", "--per-device-train-batch-size", "2", "--num-generations", "2",
             "--max-completion-length", "8", "--save-strategy", "no", "--report-to", "none", "--no-chat-template"],
            capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"}, timeout=1200,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:] + log.read_text()[-2000:]
        saved = WeMaskConfig.load(out)
        held = post(f"{url}/collective_rpc", {"method": "wemask_mask"})["results"]
        assert held and all(worker == {str(layer): dims for layer, dims in saved.dims.items()} for worker in held)
    finally:
        stop_server(process)
