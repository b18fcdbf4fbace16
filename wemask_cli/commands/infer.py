"""`wemask infer`: generate with and without WeMask, one model load for any number of mask rates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wemask_cli.engines.base import DEFAULT_ENGINE, EngineRequest, engine_class
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.outputs import atomic_write_text, dumps_strict
from wemask_cli.prompts.files import read_prompt_file
from wemask_cli.prompts.rendering import encode_left_truncated, warn_truncated
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.finite import check_temperature
from wemask_cli.runtime.ranks import is_main_process, join_group


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 8
    chat_template: bool = True

    def __post_init__(self) -> None:
        """Check the flags before any model is loaded."""
        check_temperature(self.temperature)
        if not 0 < self.top_p <= 1:
            raise WeMaskError(f"--top-p {self.top_p:g} is out of range: use a number in (0, 1]")
        for flag, value in (("--batch-size", self.batch_size), ("--max-new-tokens", self.max_new_tokens)):
            if value < 1:
                raise WeMaskError(f"{flag} {value} is not valid: use 1 or more")


def read_prompts(prompts: list[str] | None, input_file: Path | None) -> list[str | list[dict]]:
    """Prompts from --prompt flags, or an --input file (prompts.read_prompt_file: jsonl rows or text lines)."""
    if prompts and input_file:
        raise WeMaskError("give prompts either with --prompt or with --input, not both")
    if prompts:
        return list(prompts)
    if input_file is None:
        raise WeMaskError("no prompt given: use --prompt TEXT (repeatable) or --input FILE (.jsonl or text lines)")
    return read_prompt_file(input_file, "--input")


def generate(engine, prompts: list, settings: GenerationSettings) -> tuple[list[str], list[int]]:
    """Batched generation (engines.generation.generate), greedy unless a temperature is given; prompts longer than
    the model's context (less --max-new-tokens) are cut from the left. Returns the completions and each prompt's cut."""
    from wemask_cli.engines.generation import generate as generate_batches

    tokenizer, positions = engine.tokenizer, engine.context_length()
    limit = None if positions is None else positions - settings.max_new_tokens
    if limit is not None and limit < 1:
        raise WeMaskError(f"--max-new-tokens {settings.max_new_tokens} leaves no room for a prompt in the model's {positions} positions")
    encoded, _, cuts = encode_left_truncated(tokenizer, prompts, settings.chat_template, limit)
    completions = generate_batches(engine, tokenizer, encoded, max_new_tokens=settings.max_new_tokens,
                                   temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed,
                                   batch_size=settings.batch_size)
    return completions, cuts


def run_infer(engine, prompts: list, configs: list[WeMaskConfig | None], settings: GenerationSettings) -> list[dict]:
    """Generate once per config (None: no mask) on one loaded engine; one record per prompt and config."""
    records, cuts = [], []
    for config in configs:
        with engine.use_mask(config) as resolved:
            completions, cuts = generate(engine, prompts, settings)
        for prompt, completion, cut in zip(prompts, completions, cuts):
            records.append(
                {
                    "input": prompt,
                    "completion": completion,
                    "mask_rate": resolved.mask_rate if resolved else 0.0,
                    "wemask": resolved.to_dict() if resolved else None,
                    "truncated": cut > 0,
                    "engine": engine.name,
                }
            )
    limit = engine.context_length()
    if limit is not None:
        warn_truncated(cuts, limit - settings.max_new_tokens, f"the model's {limit} positions minus --max-new-tokens {settings.max_new_tokens}")
    return records


def load_for_infer(request: InferRequest, prompts: list):
    """(the loaded engine, the WeMask configs to run), sized for the job: --batch-size sequences at once of the
    longest prompt (its characters, at least its tokens) plus --max-new-tokens."""
    settings = request.settings
    longest = max(len(json.dumps(prompt)) for prompt in prompts)
    engine = engine_class(request.engine)
    return engine.load(EngineRequest(
        request.model, request.dtype, request.mask, request.base_quantization, request.trust_remote_code,
        memory=request.vllm_memory, sequences=min(settings.batch_size, len(prompts)), tokens=longest + settings.max_new_tokens,
        tensor_parallel=request.parallel[0], data_parallel=request.parallel[1],
    ))


def write_jsonl(records: list[dict], path: Path) -> Path:
    """One strict-JSON line per record, written atomically."""
    lines = (json.dumps(json.loads(dumps_strict(record))) + "\n" for record in records)
    return atomic_write_text(path, "".join(lines))


@dataclass
class InferRequest:
    """Everything `wemask infer` was asked, parsed: `mask` is a masking.MaskRequest."""

    model: str | None
    mask: object
    settings: GenerationSettings
    prompts: list[str] | None = None
    input: Path | None = None
    output: Path | None = None
    overwrite: bool = False
    dtype: str = "auto"
    base_quantization: str = "recorded"  # models.BASE_QUANTIZATIONS
    engine: str = DEFAULT_ENGINE
    vllm_memory: float | None = None  # --vllm-memory: GiB of KV cache on CPU, a share of the GPU
    trust_remote_code: bool = False
    parallel: tuple[int, int] = (1, 1)  # --tensor-parallel-size, --data-parallel-size


def infer(request: InferRequest) -> list[dict]:
    """The whole command: --output and the prompts checked before the model loads, every prompt generated at every
    setting, --output written. Returns the records (the CLI renders them)."""
    from wemask_cli.models.preflight import check_model
    from wemask_cli.models.sources import model_inputs
    from wemask_cli.outputs import check_output_file
    from wemask_cli.runtime.progress import status

    if request.output is not None:
        inputs = [*model_inputs(request.model), ("--input", request.input)]
        check_output_file(request.output, overwrite=request.overwrite, flag="--output", inputs=inputs)
    prompts = read_prompts(request.prompts, request.input)
    engine_class(request.engine).check_installed()  # then the model, before torch is imported
    check_model(request.model, request.mask.me_layer)
    join_group()  # under a launcher: every process generates its share of the batches (runtime.ranks.map_batches)
    with status(engine_class(request.engine).loading()):
        engine, configs = load_for_infer(request, prompts)  # torch: once inputs are good
    with status(f"Generating {len(prompts)} prompt(s) x {len(configs)} setting(s)..."):
        records = run_infer(engine, prompts, configs, request.settings)
    if request.output and is_main_process():  # every process holds every record: the main process writes them
        write_jsonl(records, request.output)
    return records
