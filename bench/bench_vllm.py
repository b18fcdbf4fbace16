"""WeMask in vLLM on the embedded model: generation throughput masked / plain in the same vLLM engine (goal >= 0.97),
and vLLM against transformers generate() on the same prompts.

8 prompts (the first bundled locate prompts) x 16 new tokens, greedy, every sequence forced to the full length; vLLM in
this process, eager (CPU), float32. Plain = the original vLLM attention classes (remove_wemask); masked = r = 0.3
from layer 11. Runs alternate; the median of repeats, and the best of them (the least disturbed by other load on a
shared machine, which makes single runs vary up to 20x here). With WEMASK_BENCH_VLLM_COMPILE=1 it also starts a
compiled engine (enforce_eager=False, minutes on a CPU) and reports whether its masked greedy tokens equal the eager
ones.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from importlib import resources

PROMPTS = 8
NEW_TOKENS = 16
REPEATS = 10
SMOKE = {"PROMPTS": 2, "NEW_TOKENS": 4, "REPEATS": 1}
NEEDS = ("vllm",)
CONFIG = dict(mask_rate=0.3, me_layer=11)


def bundled_prompts() -> list[str]:
    text = resources.files("wemask_cli.resources").joinpath("locate_prompts.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [row["text"] if "text" in row else "\n".join(m["content"] for m in row["messages"]) for row in rows][:PROMPTS]


def vllm_throughput(llm, prompts, masked: bool) -> tuple[float, float]:
    """Generated tokens per second of wall time and of CPU time for one batch, plain (original classes) or masked."""
    from vllm import SamplingParams

    from wemask_cli.engines.vllm import install_wemask, remove_wemask
    from wemask_cli.method.config import WeMaskConfig

    llm.apply_model(lambda m: install_wemask(m, WeMaskConfig(**CONFIG)) if masked else remove_wemask(m))
    llm.reset_prefix_cache()
    params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, ignore_eos=True)
    start, cpu = time.perf_counter(), time.process_time()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu)


def transformers_throughput(prompts) -> float:
    import torch

    from wemask_cli.models.loading import load_model

    loaded = load_model(None, dtype="float32")
    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        start = time.perf_counter()
        loaded.model.generate(**batch, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                              pad_token_id=tokenizer.pad_token_id)
        elapsed = time.perf_counter() - start
    return len(prompts) * NEW_TOKENS / elapsed


def masked_tokens(enforce_eager: bool, prompts) -> list[list[int]]:
    from vllm import LLM, SamplingParams

    from wemask_cli.engines.vllm import install_wemask
    from wemask_cli.method.config import WeMaskConfig
    from wemask_cli.models.gguf_cache import embedded_model_dir

    llm = LLM(model=str(embedded_model_dir()), dtype="float32", max_model_len=512, enforce_eager=enforce_eager)
    llm.apply_model(lambda m: install_wemask(m, WeMaskConfig(mask_rate=1.0, me_layer=11)))
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def run() -> dict:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ["WEMASK_VLLM_ARM"] = "1"
    from vllm import LLM

    from wemask_cli.engines.vllm.plugin import register
    from wemask_cli.models.gguf_cache import embedded_model_dir

    register()
    prompts = bundled_prompts()
    llm = LLM(model=str(embedded_model_dir()), dtype="float32", max_model_len=512, enforce_eager=True)
    vllm_throughput(llm, prompts, masked=False)  # warm-up
    plain, masked = [], []
    for repeat in range(REPEATS):
        for use_mask in ((False, True) if repeat % 2 == 0 else (True, False)):
            (masked if use_mask else plain).append(vllm_throughput(llm, prompts, use_mask))
    plain_rate, masked_rate = (statistics.median(wall for wall, _ in runs) for runs in (plain, masked))
    plain_best, masked_best = (max(wall for wall, _ in runs) for runs in (plain, masked))
    plain_cpu, masked_cpu = (statistics.median(cpu for _, cpu in runs) for runs in (plain, masked))
    hf_rate = transformers_throughput(prompts)
    figures = {
        "vLLM plain tokens/s": plain_rate,
        "vLLM masked tokens/s": masked_rate,
        "vLLM masked / plain (goal >= 0.97)": masked_rate / plain_rate,
        "vLLM masked / plain, CPU time": masked_cpu / plain_cpu,
        "vLLM masked / plain, best runs": masked_best / plain_best,
        "transformers generate tokens/s": hf_rate,
        "vLLM plain / transformers": plain_rate / hf_rate,
    }
    if os.environ.get("WEMASK_BENCH_VLLM_COMPILE") == "1":
        del llm
        figures["compiled == eager masked tokens"] = str(masked_tokens(False, prompts[:4]) == masked_tokens(True, prompts[:4]))
    return figures
