"""`--engine vllm`: a vLLM engine in this process, answering the Engine protocol (engines/base.py).

`VllmEngine.load` checks everything it can before any model loads (vLLM present, the folder's saved remedies and
mask, the architecture, the flags), resolves the mask configs, then starts vLLM: `use_mask(config)` installs a
WeMask for the duration of a block, `token_logprobs` scores prompts (vLLM prompt log-probabilities),
`generate_ids` generates. Everything runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the mask can
change between settings. Importing this module imports neither torch nor vllm (the engine registry lists it).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from wemask_cli.engines.base import ENGINES, Engine, EngineRequest
from wemask_cli.engines.vllm.install import check_vllm_installed
from wemask_cli.engines.vllm.memory import DEFAULT_SEQUENCES, VllmJob
from wemask_cli.engines.vllm.plugin import ARM_VARIABLE, activate
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError


@ENGINES.register
class VllmEngine(Engine):
    """One vLLM `LLM` over a model folder, armed for WeMask (the mask changes in place, also when compiled)."""

    name = "vllm"
    summary = "the same mask in vLLM; needs `pip install wemask-cli[vllm]`"
    supports = frozenset({"rollouts", "parallel"})  # TRL's --use-vllm rollouts (rollouts.py); vLLM's parallelism

    def __init__(self, source: str, dtype: str, seed: int = 0, enforce_eager: bool | None = None,
                 job: VllmJob | None = None, tensor_parallel: int = 1):
        from wemask_cli.engines.vllm.memory import engine_memory, memory_override, start_errors
        from wemask_cli.engines.vllm.parallel import check_heads, cpu_workers_bound
        from wemask_cli.engines.vllm.support import check_cpu_attention, folder_config, require_vllm

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # apply_model runs our functions in-process
        os.environ[ARM_VARIABLE] = "1"
        vllm = require_vllm()
        import torch

        activate()  # the plugin, also when its entry point is not installed (an editable checkout run from source)
        on_gpu = torch.cuda.is_available()
        if enforce_eager is None:
            enforce_eager = os.environ.get("WEMASK_VLLM_EAGER", "0" if on_gpu else "1") == "1"
        model = folder_config(source) or {}
        memory = engine_memory(model, dtype, job or VllmJob(), on_gpu)
        if not on_gpu:
            check_cpu_attention(model, source)
        check_heads(model, tensor_parallel)
        with memory_override(memory), cpu_workers_bound(tensor_parallel, 1, on_gpu), start_errors(source):
            self.llm = vllm.LLM(model=source, dtype=dtype, seed=seed, enforce_eager=enforce_eager,
                                tensor_parallel_size=tensor_parallel, use_tqdm_on_load=sys.stderr.isatty(), **memory)  # its loading bar: a terminal's only
        model_config = self.llm.llm_engine.model_config
        self.max_model_len, self.dtype = model_config.max_model_len, model_config.dtype
        self.versions = {"vllm": vllm.__version__}  # recorded in eval provenance
        self.source = source
        self.current: WeMaskConfig | None = None
        self.check_saved_mask(source)

    @classmethod
    def rollouts(cls):
        from wemask_cli.engines.vllm.rollouts import VllmRollouts

        return VllmRollouts()

    @classmethod
    def check_installed(cls) -> None:
        check_vllm_installed()

    @classmethod
    def load(cls, request: EngineRequest) -> tuple[Engine, list]:
        job = VllmJob(request.memory, request.sequences or DEFAULT_SEQUENCES, request.tokens)
        return load_vllm(request.model, request.dtype, request.mask, job, request.tensor_parallel, request.data_parallel)

    def context_length(self) -> int | None:
        return self.max_model_len

    def check_saved_mask(self, source: str) -> None:
        """The folder's saved mask is what the engine holds (a loader the plugin missed would serve it unmasked)."""
        from wemask_cli.engines.vllm.support import saved_wemask_for_vllm
        from wemask_cli.engines.vllm.tensor_mask import VllmEngineError, current_mask

        saved = saved_wemask_for_vllm(source)
        if saved is None or not saved.active:
            return
        held = one_mask(self.llm.apply_model(current_mask))
        if not held or (saved.dims is not None and held != saved.dims):
            raise VllmEngineError(
                f"vLLM loaded {source} without its saved WeMask (its model loader bypassed the wemask plugin): "
                "load it with vLLM's default --load-format, or use --engine transformers"
            )

    def install(self, config: WeMaskConfig | None) -> WeMaskConfig | None:
        """Install `config` (None: no mask) in every worker; cached prefixes computed under another mask are dropped."""
        from wemask_cli.engines.vllm.tensor_mask import install_wemask

        workers = self.llm.apply_model(partial(install_wemask, config=config))  # pickled to tensor-parallel workers
        one_mask([worker.config.dims or {} for worker in workers])
        installed = workers[0]
        self.llm.reset_prefix_cache()
        self.current = installed.config if config is not None else None
        return self.current

    @contextmanager
    def use_mask(self, config: WeMaskConfig | None):
        """Install `config` for a block (yields the resolved config, dims recorded); no mask afterwards."""
        try:
            yield self.install(config)
        finally:
            self.install(None)

    def token_logprobs(self, sequences: list[list[int]]) -> list:
        """For each sequence, log p(token t | tokens < t) for t = 1..len-1 (float32 CPU tensors), from vLLM's
        prompt log-probabilities; like scoring.token_logprobs."""
        import torch
        from vllm import SamplingParams, TokensPrompt

        from wemask_cli.engines.vllm.support import cpu_kernel_errors

        longest = max((len(s) for s in sequences), default=0)
        if self.max_model_len and longest > self.max_model_len:  # vLLM takes the last token in too, to score it
            raise WeMaskError(f"--engine vllm scores a sequence of {longest} tokens whole (its last token included) and the "
                              f"model's context is {self.max_model_len} positions: at most {self.max_model_len - 1} "
                              f"tokens fit (for perplexity, --window {self.max_model_len - 1}), or use --engine transformers")
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        with cpu_kernel_errors(self.source):
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=False)
        scores = []
        for sequence, output in zip(sequences, outputs):
            found = output.prompt_logprobs[1:]
            scores.append(torch.tensor([step[token].logprob for step, token in zip(found, sequence[1:])], dtype=torch.float32))
        return scores

    def generate_ids(self, encoded: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float,
                     seed: int, batch_size: int = 8, advance=None) -> list[list[int]]:
        """New token ids per prompt, all prompts at once (vLLM schedules its own batches): greedy at temperature 0
        (the transformers engine's tokens), else sampled with a per-prompt seed."""
        from vllm import SamplingParams, TokensPrompt

        from wemask_cli.engines.vllm.support import cpu_kernel_errors

        sampling = temperature > 0
        params = [
            SamplingParams(max_tokens=max_new_tokens, temperature=temperature if sampling else 0.0,
                           top_p=top_p if sampling else 1.0, seed=seed * 100_003 + index if sampling else None,
                           detokenize=False)
            for index in range(len(encoded))
        ]
        with cpu_kernel_errors(self.source):
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded], params, use_tqdm=False)
        if advance:
            advance(len(encoded))
        return [list(output.outputs[0].token_ids) for output in outputs]


def check_request(request, source: str) -> WeMaskConfig | None:
    """Before any model loads: the folder's saved mask and remedies, the flags. Returns the saved mask."""
    from wemask_cli.engines.vllm.support import check_folder_architecture, saved_wemask_for_vllm
    from wemask_cli.engines.vllm.tensor_mask import VllmEngineError, check_config

    if (Path(source) / "adapter_config.json").is_file():
        raise VllmEngineError(
            f"{source} is a LoRA adapter folder: the vLLM engine loads full model folders; merge it into one with "
            f"`wemask merge {source} -o MERGED` (then --model MERGED), or use --engine transformers"
        )
    saved = saved_wemask_for_vllm(source)
    probe = WeMaskConfig(mask_rate=0.0, **request.overrides())
    if probe.tokens == "massive" or probe.select == "activation":
        check_config(probe.with_updates(mask_rate=1.0, me_layer=0))
    if request.rates and any(rate > 0 for rate in request.rates) or (saved is not None and saved.active):
        check_folder_architecture(source)
    return saved


def one_mask(workers: list[dict]) -> dict:
    """The {layer: dims} every worker holds (tensor-parallel ranks mask the same dims); a VllmEngineError otherwise."""
    from wemask_cli.engines.vllm.tensor_mask import VllmEngineError

    if any(held != workers[0] for held in workers[1:]):
        raise VllmEngineError(f"vLLM's workers hold different masks ({workers!r:.300}): use --tensor-parallel-size 1 and report this")
    return workers[0]


def load_vllm(spec: str | None, dtype: str, request, job: VllmJob | None = None, tensor_parallel: int = 1,
              data_parallel: int = 1) -> tuple[VllmEngine, list]:
    """(the started VllmEngine, the mask configs to run). `--me-layer auto` locates the ME layer, and `--select
    direction` estimates the massive direction, with the transformers model first (freed before vLLM starts)."""
    import torch

    from wemask_cli.engines.vllm.parallel import check_parallel
    from wemask_cli.engines.vllm.support import require_vllm, vllm_dtype
    from wemask_cli.engines.vllm.tensor_mask import check_config
    from wemask_cli.models.loading import LoadedModel, load_model, load_tokenizer, resolve_dtype, saved_run
    from wemask_cli.models.sources import resolve_source
    from wemask_cli.models.weights import require_finite_folder
    from wemask_cli.runtime.tested import warn_untested_versions

    require_vllm()  # before the embedded model is converted or anything is read
    check_parallel(tensor_parallel, data_parallel, torch.cuda.is_available(), in_process=True)
    resolve_dtype(dtype)  # the same one-line error for a bad --dtype
    source = resolve_source(spec)
    check_request(request, source)
    require_finite_folder(source)  # the transformers path's refusal, before vLLM serves the weights
    plain = LoadedModel(model=None, tokenizer=None, source=source, saved=saved_run(source))
    if request.effective_me_layer(plain.saved_wemask) == "auto" or request.needs_direction(plain.saved_wemask):
        plain = load_model(source, dtype=dtype, interventions=False)  # locates, or estimates the massive direction
    configs = request.configs(plain)
    for config in configs:
        if config is not None:
            check_config(config)
    warn_untested_versions()  # the inputs checked, before vLLM starts (once per command)
    tokenizer = plain.tokenizer or load_tokenizer(source)
    plain = None
    free_locate_model()
    engine = VllmEngine(source, vllm_dtype(dtype), job=job, tensor_parallel=tensor_parallel)
    engine.tokenizer, engine.saved = tokenizer, saved_run(source)  # wemask encodes; vLLM gets token ids
    return engine, configs


def free_locate_model() -> None:
    """Give back the memory of the transformers model `--me-layer auto` used (its last reference is gone) before
    vLLM sizes its share of the GPU from the free memory."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()  # a no-op where CUDA was never used
    held = torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0
    if held > 1 << 30:
        print(f"wemask: {held / (1 << 30):.1f} GiB of GPU memory is still held by this process as vLLM starts",
              file=sys.stderr)

