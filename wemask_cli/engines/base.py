"""The Engine protocol: what `wemask infer` and every `wemask eval` task ask of whatever runs the forward.

Tasks build requests (token ids to score, prompts to continue), engines answer them (lm-eval's split between a
Task and an LM). An engine is one `Engine` subclass, registered in `ENGINES` (entry-point group `wemask.engines`:
`[project.entry-points."wemask.engines"] mine = "my_pkg.engine:MyEngine"`). It declares what it supports
(`FEATURES`); a command asks `require(feature)` and a missing feature is refused in one line naming an engine that
has it. Nothing outside an engine names one. This module imports no torch (`wemask infer --help` reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.registry import Registry, RegistryError

DEFAULT_ENGINE = "transformers"  # --engine's default
AUTO_BATCH_START = 64  # --batch-size auto starts here (an engine that schedules its own batches keeps it)
# feature -> what asking for it without the engine's support is refused with ({engine}: one engine that has it)
FEATURES = {
    "interventions": "{source} carries saved interventions ({names}) that the {name} engine does not run: use --engine {engine}",
    "quantization": "--quantize simulates quantization on the {engine} model's weights: use --engine {engine}",
    "massive": "--tokens massive picks tokens from the residual stream, which the {name} engine does not see: use --engine {engine}",
    "adapters": "{source} is a LoRA adapter folder, which the {name} engine does not load: use --engine {engine}",
    "module": "{flag} runs through the {engine} model: use --engine {engine}",  # holds a transformers model (`module`)
    "rollouts": "{flag} generates a trainer's rollouts in an engine that declares them; the {name} engine does not",  # rollouts()
    "parallel": "{flag} splits the model or the prompts across the workers of an engine that runs them; the {name} engine "
                "runs one process: use --engine {engine}",  # EngineRequest.tensor_parallel / data_parallel
}


@dataclass
class EngineRequest:
    """What a command asks an engine to load: the model flags, the WeMask request (masking.MaskRequest), and the
    job it will run (`memory`: --vllm-memory; `sequences` at once, `tokens` of the longest: None when unknown)."""

    model: str | None
    dtype: str = "auto"
    mask: Any = None
    base_quantization: str = "recorded"  # models.BASE_QUANTIZATIONS
    trust_remote_code: bool = False
    memory: float | None = None
    sequences: int | None = None
    tokens: int | None = None
    tensor_parallel: int = 1  # --tensor-parallel-size (an engine that declares `parallel`)
    data_parallel: int = 1  # --data-parallel-size


@dataclass(frozen=True)
class ServeRequest:
    """`wemask vllm-serve`: a server for a trainer's rollouts (TRL's server mode) with the mask in every worker."""

    model: str | None
    mask: Any = None  # mask_request.MaskRequest
    host: str = "0.0.0.0"
    port: int = 8000
    tensor_parallel: int = 1
    data_parallel: int = 1
    dtype: str = "auto"
    max_model_len: int | None = None
    memory: float | None = None
    enforce_eager: bool | None = None  # None: on CPU only
    seed: int = 0
    trust_remote_code: bool = False


class Engine:
    """Base class. An instance is a loaded model: `tokenizer` (wemask encodes, the engine gets token ids), `source`
    (the folder or hub id), `saved` (its interventions.SavedRun), `installed` (the saved interventions it runs),
    `versions` (recorded in eval provenance), `dtype`, and `module`: the transformers model, for an engine that
    declares `module` (lm-eval's HFLM and --quantize run on it)."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""  # --engine's help
    supports: ClassVar[frozenset[str]] = frozenset()  # of FEATURES
    tokenizer: Any = None
    source: str = ""
    saved: Any = None
    installed: Any = None
    versions: dict = {}  # read only: an engine that records library versions sets its own
    dtype: Any = None
    module: Any = None

    @classmethod
    def load(cls, request: EngineRequest) -> tuple[Engine, list]:
        """(the loaded engine, the WeMask configs to run: one per --mask-rate, None for no mask)."""
        raise NotImplementedError

    @classmethod
    def check_installed(cls) -> None:
        """Refuse in one line what this engine lacks that is known before anything heavy is imported (its package
        missing); a command calls it first."""

    @classmethod
    def loading(cls) -> str:
        """The status line while it loads."""
        return f"Loading model in {cls.name}..."

    @classmethod
    def require(cls, feature: str, **fields) -> None:
        """Refuse `feature` in one line when this engine does not declare it (`fields` fill the message)."""
        if feature not in cls.supports:
            having = next((name for name, engine in ENGINES.entries().items() if feature in engine.supports), DEFAULT_ENGINE)
            raise WeMaskError(FEATURES[feature].format(name=cls.name, engine=having, **fields))

    @classmethod
    def check_request(cls, request: EngineRequest) -> None:
        """Before anything loads (call it first in `load`): refuse `--tokens massive`, a LoRA adapter folder and a
        folder's saved interventions when the engine does not declare them."""
        from pathlib import Path

        from wemask_cli.models.loading import saved_run
        from wemask_cli.models.sources import resolve_source
        from wemask_cli.outputs import ADAPTER_CONFIG_FILE

        if request.mask is not None and request.mask.tokens == "massive":
            cls.require("massive")
        for flag, size in (("--tensor-parallel-size", request.tensor_parallel), ("--data-parallel-size", request.data_parallel)):
            if size != 1:
                cls.require("parallel", flag=flag)
        if {"adapters", "interventions"} <= cls.supports:
            return
        source = resolve_source(request.model)
        if (Path(source) / ADAPTER_CONFIG_FILE).is_file():
            cls.require("adapters", source=source)
        saved = saved_run(source)
        if saved is not None and saved.remedies:
            cls.require("interventions", source=source, names=", ".join(remedy.kind for remedy in saved.remedies))

    @classmethod
    def rollouts(cls) -> Rollouts:
        """How this engine generates a TRL trainer's rollouts (an engine that declares `rollouts` overrides this)."""
        cls.require("rollouts", flag="--use-vllm")
        raise NotImplementedError

    def use_mask(self, config) -> AbstractContextManager:
        """Install the WeMaskConfig `config` (None: no mask) for a block, yielding the resolved config (dims
        recorded) or None; afterwards exactly what was there before."""
        raise NotImplementedError

    def token_logprobs(self, sequences: list[list[int]]) -> list:
        """For each sequence, log p(token t | tokens < t) for t = 1..len-1 (float32 CPU tensors)."""
        raise NotImplementedError

    def generate_ids(self, encoded: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                     batch_size: int = 8, advance: Callable[[int], None] | None = None) -> list[list[int]]:
        """New token ids per prompt: greedy at temperature 0, else sampled from `seed`; `advance(k)` as `k` more prompts
        are done (`batch_size` at once where the engine does not schedule its own batches)."""
        raise NotImplementedError

    def context_length(self) -> int | None:
        """The most positions a sequence may have (None: the model does not say)."""
        raise NotImplementedError

    def score_options(self, groups: list[tuple[list[int], list[list[int]]]], batch_size: int,
                      advance: Callable[[int], None] | None = None) -> list[list[float]]:
        """log p(option | context) summed over the option's tokens, for every (context ids, [option ids]) group:
        each context + option scored as one sequence (an engine may share the context's work)."""
        from wemask_cli.runtime.ranks import map_batches

        pairs = [(context + option, len(option)) for context, options in groups for option in options]

        def score(_k: int, start: int, end: int) -> list[float]:
            batch = pairs[start:end]
            return [float(logp[-length:].sum()) for (_, length), logp in zip(batch, self.token_logprobs([s for s, _ in batch]))]

        sums = map_batches(len(pairs), batch_size, score, advance)
        result, at = [], 0
        for _, options in groups:
            result.append(sums[at : at + len(options)])
            at += len(options)
        return result

    def fit_batch_size(self, length: int, limit: int) -> int:
        """`--batch-size auto`: the batch of sequences of `length` tokens to run (at most `limit`)."""
        return max(1, min(AUTO_BATCH_START, limit))


class Rollouts:
    """A trainer's rollouts from an engine (TRL's --use-vllm), in the order a stage calls them: `check_installed()`
    before torch or TRL is imported, `quiet()` before TRL loads, `check(resolved, aware_mask)` before anything loads (one line for what the engine cannot run),
    `building(ctx)` around the trainer's construction, `install(trainer, config)` once the policy's WeMask
    (`config`, None for none) is installed, so that rollouts carry the same mask."""

    def quiet(self) -> None:
        """Before TRL loads: silence what the engine knows to be noise."""

    def check_installed(self) -> None:
        """Before torch or TRL is imported (the training preflight): one line for a package the engine lacks."""

    def check(self, resolved, aware_mask: bool) -> None:
        raise NotImplementedError

    def building(self, ctx) -> AbstractContextManager:
        raise NotImplementedError

    def install(self, trainer, config) -> None:
        raise NotImplementedError

    def serve(self, request: ServeRequest) -> None:
        """`wemask vllm-serve`: start the server a trainer's server mode generates from (replaces this process)."""
        raise WeMaskError("wemask vllm-serve: the installed rollout engine runs no server")


NO_ROLLOUT_ENGINE = "--use-vllm: no installed engine generates rollouts: pip install wemask-cli[vllm]"


def rollout_engine() -> type[Engine] | None:
    """The first registered engine that declares `rollouts` (None: none does)."""
    return next((engine for engine in ENGINES.entries().values() if "rollouts" in engine.supports), None)


def check_engine(entry) -> None:
    """A registered engine declares only known features."""
    unknown = set(entry.supports) - set(FEATURES)
    if unknown:
        raise RegistryError(f"the engine {entry.name!r} declares unknown features {sorted(unknown)} (known: {sorted(FEATURES)})")


ENGINES: Registry[type[Engine]] = Registry(
    "engine", "wemask.engines", Engine, package="wemask_cli.engines", builtin=("transformers", "vllm.engine"),
    flag="--engine", check=check_engine,
)


def engine_class(name: str) -> type[Engine]:
    """The engine `--engine name` names (one line naming the known ones otherwise)."""
    return ENGINES.get(name)


def engine_help() -> str:
    """--engine's help: every registered engine with its summary."""
    return " | ".join(f"{name} ({cls.summary})" if cls.summary else name for name, cls in ENGINES.entries().items()) + "."
