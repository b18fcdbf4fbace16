"""`wemask eval`: claim the output folder, read the data, load the model once, sweep, write (the CLI renders).

Order matters: flags, output folder (claimed, checked writable) and data are all checked before the model loads,
so a typo or an unwritable folder costs nothing. The sweep's axes are the mask rates and, with --quantize, the
quantization settings (wemask_cli.eval.quantize); every variant is applied to the one loaded model and removed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wemask_cli.engines.base import DEFAULT_ENGINE
from wemask_cli.eval.settings import EvalSettings
from wemask_cli.outputs import check_inputs_outside, check_writable, claim_on_main
from wemask_cli.runtime import ranks
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say, status

DEFAULT_ROOT = Path("runs") / "eval"


@dataclass
class EvalRequest:
    """Everything `wemask eval` was asked, parsed: `mask` is a masking.MaskRequest; `quantize` the --quantize text."""

    model: str | None
    settings: EvalSettings
    mask: object
    output: Path | None = None
    overwrite: bool = False
    dtype: str = "auto"
    base_quantization: str = "recorded"  # models.BASE_QUANTIZATIONS
    quantize: str | None = None  # e.g. "none,w8a8,w4a4,fp4"
    fp4_block_size: int = 16
    smoothquant: float | None = None
    engine: str = DEFAULT_ENGINE  # an engine's name (wemask_cli.engines.base.ENGINES)
    vllm_memory: float | None = None  # --vllm-memory: GiB of KV cache on CPU, a share of the GPU
    trust_remote_code: bool = False
    parallel: tuple[int, int] = (1, 1)  # --tensor-parallel-size, --data-parallel-size


def make_task(request: EvalRequest):
    """The task object, its settings checked (before anything is loaded)."""
    from dataclasses import replace

    from wemask_cli.eval.tasks.registry import task_class, tasks

    settings = request.settings
    chosen = [cls for cls in tasks().values() if cls.selector]  # tasks chosen by their own flag (--lm-eval-tasks)
    selected = [cls for cls in chosen if settings.option(cls.selector) is not None]
    if selected:
        cls, flag = selected[0], selector_flag(selected[0])
        if settings.task not in (None, cls.name):
            raise WeMaskError(f"give either --task or {flag}, not both")
        return create_task(cls, replace(settings, task=None))
    for cls in chosen:
        given = [option.name for option in cls.options if settings.option(option.dest) is not None]
        if given:
            raise WeMaskError(f"{given[0]} applies to {selector_flag(cls)}")
    if settings.task is None:
        alternatives = "".join(f" (or {selector_flag(cls)})" for cls in chosen)
        raise WeMaskError(f"no --task given: use one of {', '.join(tasks())}{alternatives}")
    return create_task(task_class(settings.task), settings)


def create_task(cls, settings: EvalSettings):
    """`cls.create` with its settings resolved against its declarations (unless it checks them itself)."""
    from wemask_cli.eval.tasks.resolve import resolve

    return cls.create(settings if cls.checks_settings else resolve(settings, cls))


def selector_flag(cls) -> str:
    """The flag of the option that selects `cls` in place of --task."""
    return next(option.name for option in cls.options if option.dest == cls.selector)


def default_output(task: str, root: Path = DEFAULT_ROOT) -> tuple[Path, list[Path]]:
    """runs/eval/TASK-TIME, created exclusively: two runs started in the same second get -2, -3, ... suffixes.
    Returns it and the folders created for it (deepest first: a failed run removes them again)."""
    check_writable(root, is_dir=True, flag="--output")
    base = root / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    for attempt in range(1, 1000):
        candidate = base if attempt == 1 else base.with_name(f"{base.name}-{attempt}")
        absolute = Path(os.path.abspath(candidate))
        missing = [p for p in (absolute, *absolute.parents) if not os.path.lexists(p)]
        try:
            candidate.mkdir(parents=True)
            return candidate, missing
        except FileExistsError:
            continue
    raise WeMaskError(f"could not create a fresh folder next to {base}: pass --output DIR")


def quantize_axes(request: EvalRequest, prepared) -> list:
    """The quantization axis (none without --quantize): one setting per scheme, applied by eval/quantize/'s
    `simulate(model, scheme, block_size=, smoothquant=, calibration=)`; rows carry `quantize`, and the change
    against `none` (when swept) is `delta_quantize`. SmoothQuant calibrates on the task's first sequences."""
    if request.quantize is None:
        return []
    from functools import partial

    import torch

    from wemask_cli.eval import quantize
    from wemask_cli.eval.sweep import Axis, Setting

    calibration = [torch.tensor([ids]) for ids in prepared.samples] if request.smoothquant is not None else None
    options = {"block_size": request.fp4_block_size, "smoothquant": request.smoothquant, "calibration": calibration}
    names = quantize.parse_schemes(request.quantize)
    settings = [Setting({"quantize": name}, partial(_simulated, quantize.simulate, name, options)) for name in names]
    reference = "none" if "none" in names else None
    return [Axis("quantize", settings, reference=reference, delta_key="delta_quantize", record_key="quantization")]


@contextmanager
def _simulated(simulate, scheme: str, options: dict, engine):
    with simulate(engine.module, scheme, **options):  # an engine supporting quantization holds a transformers model
        yield {"quantize": scheme, **{k: v for k, v in options.items() if k != "calibration"}}


def run_eval(request: EvalRequest, plot: Callable[[dict, Path], Path] | None = None) -> tuple[dict, Path, list[Path]]:
    """The whole command: returns (metrics.json's document, the output folder, the files written)."""
    from wemask_cli.eval.document import metrics_document, provenance, write_outputs

    started = time.time()
    task = make_task(request)
    check_engine(request, task)
    if request.quantize is not None:
        from wemask_cli.eval.quantize import parse_schemes

        parse_schemes(request.quantize, block_size=request.fp4_block_size, smoothquant=request.smoothquant)  # before loading
    elif request.smoothquant is not None:
        raise WeMaskError("--smoothquant migrates activation scale before quantizing: add --quantize (e.g. none,w4a4)")
    from wemask_cli.models.preflight import check_model

    check_model(request.model, request.mask.me_layer)  # before torch is imported
    ranks.join_group()  # under a launcher: every process evaluates its share of the batches (ranks.map_batches)
    output, created = ((Path(request.output).expanduser(), []) if request.output
                       else ranks.from_main(lambda: default_output(task.name)))  # one folder, named by the main process
    if request.overwrite:
        from wemask_cli.models.sources import model_inputs

        inputs = [*model_inputs(request.model), *task.inputs()]
        check_inputs_outside(output, inputs, flag="--output")
    with claim_on_main(output, overwrite=request.overwrite, kind="eval", flag="--output", created=created) as claim:
        data = task.load()
        sweep, engine = evaluate(request, task, data)
        claim.clear()  # --overwrite: the previous output goes only after the data and the model were read
        prov = provenance(engine, data.provenance(), started, libraries=task.libraries)
        document = metrics_document(task=task.name, primary=task.primary, unit=task.unit, n_examples=len(data), sweep=sweep,
                                    settings=task.settings, seeds_vary=task.seed_note(), prov=prov)
        document["engine"] = request.engine
        document.update(task.document_extra())
        if not ranks.is_main_process():
            return document, output, []  # the main process writes
        staged = claim.staging("eval")  # only what it writes is recorded, whatever else the folder gets meanwhile
        written = write_outputs(document, sweep.records, staged)
        if plot is not None:
            written.append(plot(document, staged))
        claim.move_all_in(staged)
    return document, output, [output / path.name for path in written]


def evaluate(request: EvalRequest, task, data):
    """Load the engine, build the sweep's axes, tokenize once, choose the batch size, run every variant."""
    from wemask_cli.engines.base import EngineRequest, engine_class
    from wemask_cli.eval.sweep import run_sweep, wemask_axis
    from wemask_cli.outputs.trained import training_summary

    kind = engine_class(request.engine)
    with status(kind.loading()):
        engine, configs = kind.load(EngineRequest(request.model, request.dtype, request.mask, request.base_quantization,
                                                  request.trust_remote_code, memory=request.vllm_memory,
                                                  tensor_parallel=request.parallel[0], data_parallel=request.parallel[1]))
    prepared = task.prepare(engine.tokenizer, data, engine.context_length())
    task.plan(configs)
    trained = training_summary(engine.source)
    axes = [wemask_axis(configs, trained and trained["metrics"])] + quantize_axes(request, prepared)
    settings = task.settings
    batch_size = settings.batch_size
    if batch_size == "auto" and task.auto_batch:
        with status("Finding the largest batch that fits (--batch-size auto)..."):  # the main process's, for all
            batch_size = ranks.from_main(lambda: engine.fit_batch_size(prepared.longest, prepared.units))
        say(f"--batch-size auto: {batch_size}")
        task.settings = settings = _with_batch(settings, batch_size)
    variants = 1
    for axis in axes:
        variants *= len(axis.settings)
    unit = task.data_unit or task.unit
    say(f"{task.name} on {data.where}{task.reader_note(data)}: {len(data)} {unit}, {variants} setting(s) x {settings.seeds} "
        f"seed(s); seeds vary {task.seed_note()}")
    sweep = run_sweep(engine, axes, task, prepared, settings, batch_size)
    for row in sweep.results:
        row["engine"] = request.engine
    return sweep, engine


def check_engine(request: EvalRequest, task) -> None:
    """--engine: a known engine with the features the task and the flags need (its declaration), in one line before
    anything loads."""
    from wemask_cli.engines.base import engine_class

    engine = engine_class(request.engine)
    engine.check_installed()
    for feature in sorted(task.needs):
        engine.require(feature, flag="--" + task.selector.replace("_", "-") if task.selector else f"the {task.name} task")
    if request.quantize is not None:
        engine.require("quantization")


def _with_batch(settings: EvalSettings, batch_size: int) -> EvalSettings:
    from dataclasses import replace

    return replace(settings, batch_size=batch_size)
