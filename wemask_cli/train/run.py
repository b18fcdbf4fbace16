"""The one training path shared by `wemask sft`, `wemask dpo` and `wemask grpo`:

    run(stage, options, extra_args) -> RunResult

resolve (defaults < recipe < flags, resolve.py) -> check (options.py, stage.check) -> claim the output folder
(checkpoints.py) -> load data and model -> stage.build_trainer -> stage.install (install.py) -> train with the
callbacks (callbacks.py) -> save the model, the records and metrics.json (records.py).
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.outputs import check_inputs_outside, describe_os_error
from wemask_cli.runtime.atomic import write_error, write_remedy
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say
from wemask_cli.runtime.tested import warn_untested_versions
from wemask_cli.train import fsdp
from wemask_cli.train.checkpoints import PREFIX, TRAINER_STATE, barrier, checkpoint_problem, checkpoints, claim_run_folder
from wemask_cli.train.distributed import check_quantized_sharding, run_facts
from wemask_cli.train.options import TrainOptions, check_options
from wemask_cli.train.resolve import resolve
from wemask_cli.train.stage_base import Stage, TrainContext


@dataclass
class RunResult:
    output_dir: Path
    stopped_by: int | None  # the signal (SIGINT, SIGTERM) that stopped the run early
    checkpoint: str | None  # the checkpoint saved when it stopped
    metrics: dict | None
    wemask: WeMaskConfig | None
    trainer: Any = None
    stage: Stage | None = None

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


def load_inputs(stage: Stage, opts: dict, args):
    """(train dataset, eval dataset, data format, loaded model) for the resolved options."""
    from wemask_cli.data import load_training_data
    from wemask_cli.models.loading import load_model
    from wemask_cli.models.sources import resolve_source
    from wemask_cli.train.long_rows import cut_long_rows

    with args.main_process_first(desc="loading data"):
        if opts.get("datasets"):  # TRL's mixture (recipe key); test_split_size holds out its eval set
            from wemask_cli.data.mixture import load_mixture

            if opts["dataset"]:
                say("datasets: the recipe's mixture is read and --dataset is left out, as TRL's scripts do")
            train_dataset, eval_dataset, fmt = load_mixture(stage.spec.data, opts["datasets"], opts["dataset_columns"],
                                                            opts["test_split_size"], args.seed)  # fmt: skip
            opts["dataset"] = " + ".join(str(entry["path"]) for entry in opts["datasets"])
        else:
            train_dataset, fmt = load_training_data(
                stage.spec.data, opts["dataset"], split=opts["dataset_split"], config=opts["dataset_config"], columns=opts["dataset_columns"]
            )
            eval_dataset = None
        if opts["eval_dataset"]:
            eval_dataset, _ = load_training_data(
                stage.spec.data, opts["eval_dataset"], split=opts["eval_split"], config=opts["dataset_config"],
                columns=opts["dataset_columns"], what="--eval-dataset",
            )
    say(f"{stage.name}: {len(train_dataset)} examples ({fmt.name}) from {opts['dataset']}")
    quantization = "4bit" if opts["load_in_4bit"] else "8bit" if opts["load_in_8bit"] else None
    model_spec = opts["model"]
    if model_spec and Path(str(model_spec)).expanduser().is_dir():
        model_spec = str(Path(str(model_spec)).expanduser().resolve())  # adapters record their base by this path
    with args.main_process_first(desc="preparing the model"):  # a .gguf or the embedded model: converted once per node
        resolve_source(model_spec)
    pretrained = {
        "revision": opts["model_revision"], "attn_implementation": opts["attn_implementation"],
        "trust_remote_code": bool(opts["trust_remote_code"]), "quant_type": opts["bnb_4bit_quant_type"],
        "nested": opts["use_bnb_nested_quant"],
    }
    loaded = load_model(model_spec, dtype=opts["dtype"], quantization=quantization, interventions=False,  # installed by the stage
                        pretrained=pretrained)
    train_dataset = cut_long_rows(stage.name, train_dataset, loaded.tokenizer, args)
    eval_dataset = cut_long_rows(stage.name, eval_dataset, loaded.tokenizer, args, "--eval-dataset")
    return train_dataset, eval_dataset, fmt, loaded


def wemask_for_run(resolved, loaded, saved) -> WeMaskConfig:
    """The WeMask config to train with: the flags' (install.requested_wemask), or a resumed checkpoint's
    (`saved`), which must match the flags when they ask for a mask."""
    from wemask_cli.train.install import requested_wemask

    if saved is None:
        return requested_wemask(resolved, loaded)
    config = saved.wemask
    asked = requested_wemask(resolved, loaded) if resolved.mask.rates is not None else None
    if config is None:
        return asked or WeMaskConfig(mode=resolved.opts["mode"])
    if asked is not None and asked.with_updates(dims=None, seed=config.seed) != config.with_updates(dims=None):
        raise WeMaskError(f"--resume: the run was started with WeMask {config.describe()}, not {asked.describe()}: resume with the same flags")
    return config


def remedies_for_run(resolved, saved, where: str) -> tuple[list, dict]:
    """(remedy configs, their starting weights): a resumed checkpoint's or a continued model's, else the flags'.
    Flags that ask for other remedies than those carried are refused (the weights would not fit)."""
    asked = resolved.remedies
    if saved is None or not saved.remedies:
        return asked, {}
    carried = saved.remedies
    if asked and [c.to_dict() for c in asked] != [c.to_dict() for c in carried]:
        raise WeMaskError(
            f"{where} carries {'; '.join(c.describe() for c in carried)}, but the flags ask for "
            f"{'; '.join(c.describe() for c in asked)}: drop those flags to continue with what it carries"
        )
    return carried, saved.weights


@contextmanager
def disk_errors(trainer, output: Path):
    """A full disk, a file-size limit (or another OS error while saving) during training or the final save: one line
    that names the checkpoint a --resume would continue from; the failed save leaves the folder as it was."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, RuntimeError, SafetensorError) as err:
        cause = write_error(err)
        if cause is None:
            raise
        good = next((p.name for p in checkpoints(output) if checkpoint_problem(p) is None), None)
        remedy = write_remedy(cause)
        where = (f"the last complete checkpoint is {good}: {remedy} and continue with --resume" if good
                 else f"no complete checkpoint was saved: {remedy} and run again")
        raise WeMaskError(f"training stopped at step {trainer.state.global_step}: could not write to {output}: "
                          f"{describe_os_error(cause)}; {where} ({output} is kept: nothing in it was deleted)") from None


def check_remedies_fit(resolved) -> None:
    """Refuse remedy settings the model's size rules out (a rank above its hidden size) from its config, before
    the output folder is claimed or any weights load."""
    if not resolved.remedies:
        return
    from wemask_cli.models.sources import hidden_size

    size = hidden_size(resolved.opts["model"])
    for remedy in resolved.remedies if size else ():
        remedy.check_fits(size)


def run_inputs(opts: dict) -> list[tuple[str, str]]:
    """The (flag, path) of what a training run reads (hub names are skipped by the check)."""
    from wemask_cli.models.sources import model_inputs

    found = [*model_inputs(opts.get("model")), ("--dataset", opts.get("dataset")), ("--eval-dataset", opts.get("eval_dataset"))]
    rewards = [str(spec).partition(".py:")[0] + ".py" for spec in opts.get("reward") or () if ".py:" in str(spec)]
    return found + [("--reward", path) for path in rewards]


def run(stage: Stage, options: TrainOptions, extra_args: list[str] = (), callbacks: list | None = None) -> RunResult:
    """Resolve, claim the output, load, build the stage's trainer, install the interventions, train, save."""
    resolved = resolve(stage, options, list(extra_args))
    opts, args = resolved.opts, resolved.args
    check_options(opts, stage.name, resolved.mask)
    stage.check(resolved)
    fsdp.check(resolved)
    if opts["log_diagnostics"]:
        from wemask_cli.train.diagnostics import check as check_diagnostics

        check_diagnostics(resolved)
    check_quantized_sharding(opts)
    check_remedies_fit(resolved)
    output = Path(opts["output_dir"]).expanduser()
    if opts["overwrite"]:
        check_inputs_outside(output, [*run_inputs(opts), ("--config", options.config)])
    claim, resume_from = claim_run_folder(output, opts, args, stage.name)
    with claim:
        return _train(stage, resolved, output, claim, resume_from, callbacks or [])


def _train(stage: Stage, resolved, output: Path, claim, resume_from: str | None, callbacks: list) -> RunResult:
    """The run once the folder is claimed: set up, train, save; the steps of one run in order."""
    from wemask_cli.train.saving import StagedSaves
    from wemask_cli.train.steps import plain_logs

    args = resolved.args
    ctx, record, interrupt, divergence = _run_context(stage, resolved, resume_from, callbacks)
    fsdp.shard_on_cpu(args)  # accelerate alone would run FSDP on the CPU as DDP
    trainer = stage.build_trainer(ctx)
    saves = StagedSaves(trainer, claim, record)
    plain_logs(trainer)
    config = stage.install(trainer, ctx)
    if ctx.diagnostics is not None:
        ctx.diagnostics.attach(trainer)  # after the install: it measures the model as trained, the mask on in aware mode
    record.installation, record.distributed = stage.installation, run_facts(trainer, resolved)
    claim.clear()  # --overwrite: the previous output goes only now that data, model and trainer are all set up
    barrier(args)
    warn_untested_versions()  # once the inputs are checked, as training starts (a crash inside a library names them too)
    announce(config, ctx.remedies, bool(ctx.remedy_weights), resume_from)
    seconds = _run_trainer(trainer, interrupt, output, resume_from)
    checkpoint = stopped_early(divergence, interrupt, output)
    if checkpoint is not None:
        return RunResult(output, interrupt.signum or signal.SIGINT, checkpoint, None, config, trainer, stage)
    config, metrics = _save_final(trainer, saves, ctx, stage, record, output, seconds, resume_from, config)
    barrier(args)
    return RunResult(output, None, None, metrics, config, trainer, stage)


def _run_context(stage: Stage, resolved, resume_from: str | None, callbacks: list):
    """The run's inputs and record: data, model, mask and remedies (resumed ones from the checkpoint), callbacks."""
    from wemask_cli.data import content_sha256
    from wemask_cli.interventions import load_saved
    from wemask_cli.train.callbacks import Interrupt, StopOnNonFinite
    from wemask_cli.train.checkpoints import warn_schedule_change
    from wemask_cli.train.install import lora_config
    from wemask_cli.train.records import RunRecord

    opts, args = resolved.opts, resolved.args
    train_dataset, eval_dataset, fmt, loaded = load_inputs(stage, opts, args)
    resumed = load_saved(resume_from) if resume_from else None  # the checkpoint's interventions
    config = wemask_for_run(resolved, loaded, resumed)
    where = f"--resume: {resume_from}" if resume_from else f"--model {loaded.source}"
    remedies, remedy_weights = remedies_for_run(resolved, resumed if resume_from else loaded.saved, where)
    warn_schedule_change(resume_from, args)
    record = RunRecord(stage, resolved, resume_from)
    record.source, record.data_format, record.data_sha256 = loaded.source, fmt.name, content_sha256(opts["dataset"])
    interrupt, divergence = Interrupt(), StopOnNonFinite()
    diagnostics = None
    if opts["log_diagnostics"]:
        from wemask_cli.train.diagnostics import Diagnostics

        diagnostics = Diagnostics(loaded, config, args)
        callbacks = [*callbacks, diagnostics]
    ctx = TrainContext(
        options=opts, args=args, loaded=loaded, train_dataset=train_dataset, eval_dataset=eval_dataset,
        data_format=fmt, peft_config=lora_config(opts, loaded.model), wemask=config,
        callbacks=run_callbacks(callbacks, args, interrupt, record, divergence),
        remedies=remedies, remedy_weights=remedy_weights, diagnostics=diagnostics,
    )
    return ctx, record, interrupt, divergence


def _run_trainer(trainer, interrupt, output: Path, resume_from: str | None) -> float:
    """trainer.train(), Ctrl-C and a full disk handled; the seconds it took."""
    from wemask_cli.train.callbacks import TrainingAlreadyDone

    start = time.perf_counter()
    with interrupt, disk_errors(trainer, output):
        try:
            trainer.train(resume_from_checkpoint=resume_from)
        except TrainingAlreadyDone:  # killed during the final save: the checkpoint is loaded, only the save is left
            say(f"--resume: {Path(resume_from).name} is the run's last step ({trainer.state.global_step}): saving the final model")
    return time.perf_counter() - start


def _save_final(trainer, saves, ctx: TrainContext, stage: Stage, record, output: Path, seconds: float,
                resume_from: str | None, config: WeMaskConfig):
    """The final evaluation (when TRL ran none), the final save and the run's records; (config, metrics)."""
    from wemask_cli.train.records import write_metrics

    eval_dataset, args = ctx.eval_dataset, ctx.args
    eval_metrics = trainer.evaluate() if eval_dataset is not None and _eval_strategy(args) == "no" else {}  # else TRL's

    def write_records(folder: Path):
        ctx.loaded.tokenizer.save_pretrained(str(folder))
        written = record.write(folder, trainer.model)
        return written, write_metrics(trainer, folder, ctx, stage, written, seconds, eval_metrics, _resumed_step(resume_from))

    with disk_errors(trainer, output):
        config, metrics = saves.save_final(write_records) or (config, None)
    if metrics is not None:
        from wemask_cli.train.steps import rounded

        say(f"saved to {output} (final loss {rounded(metrics['final_loss'])}, {metrics['global_step']} steps)")
    return config, metrics


def announce(config: WeMaskConfig, remedies: list, saved_weights: bool, resume_from: str | None) -> None:
    """What the run trains with, in a line per intervention."""
    say(f"WeMask {config.mode}: {config.describe()}" + (f"; resuming from {resume_from}" if resume_from else ""))
    for remedy in remedies:
        say(f"{remedy.describe()}" + (" (saved weights)" if saved_weights else " (starting as the identity)"))


def _eval_strategy(args) -> str:
    return str(getattr(args.eval_strategy, "value", args.eval_strategy))


def run_callbacks(callbacks: list, args, interrupt, record, divergence) -> list:
    """The trainer callbacks of a run: the caller's, FSDP's, then wemask's own (see callbacks.py, precision.py)."""
    from wemask_cli.train.callbacks import BestModelRemedies, FinishedAtResume, LogLastStep, SaveOnInterrupt
    from wemask_cli.train.precision import PrecisionProbe
    from wemask_cli.train.steps import StepLines

    record.precision = PrecisionProbe()
    return [*callbacks, *fsdp.callbacks(args), record.precision, SaveOnInterrupt(interrupt), BestModelRemedies(record), divergence,
            FinishedAtResume(), LogLastStep(), StepLines()]


def stopped_early(divergence, interrupt, output: Path) -> str | None:
    """A diverged run is one error line; an interrupted one returns the checkpoint it saved (the CLI's stop line names
    it); else None."""
    if divergence.diverged is not None:
        step, why = divergence.diverged
        good = next((p.name for p in checkpoints(output) if checkpoint_problem(p) is None), None)
        kept = f"the last good checkpoint, {good}, is kept" if good else "no checkpoint was saved"
        raise WeMaskError(f"training diverged at step {step}: {why}; stopped without saving the model ({kept}); try a lower --learning-rate")
    if interrupt.stopped_at is None:
        return None
    return str(output / f"{PREFIX}-{interrupt.stopped_at}")


def _resumed_step(resume_from: str | None) -> int:
    if not resume_from:
        return 0
    import json

    return int(json.loads((Path(resume_from) / TRAINER_STATE).read_text()).get("global_step") or 0)
