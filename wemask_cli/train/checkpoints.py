"""The run's output folder: claimed before anything loads (outputs.py), and the checkpoint `--resume` continues
from: the newest *complete* one, with a line naming each newer one skipped and why."""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.method.config import CONFIG_NAME
from wemask_cli.outputs import ADAPTER_WEIGHTS_FILE, METRICS_FILE, OURS, RUN_RECORD_FILE, OutputClaim, claim_output_dir
from wemask_cli.runtime.errors import WeMaskError, first_line
from wemask_cli.runtime.progress import say

PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR, without importing transformers
TRAINER_STATE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME


def barrier(args) -> None:
    """Wait for every process of a distributed run."""
    if args.world_size > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def _read_json(path: Path) -> str | None:
    """None when `path` holds valid JSON, else why not."""
    if not path.is_file():
        return f"no {path.name}"
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return f"{path.name} is torn (not valid JSON)"
    return None


def checkpoint_problem(path: Path, *, ours: bool = True) -> str | None:
    """Why `path` is not a complete checkpoint (None: it is). `ours`: also require wemask's records, the last
    files a wemask checkpoint gets (a plain TRL checkpoint given with --resume-from-checkpoint has none)."""
    problem = _read_json(path / TRAINER_STATE)
    if problem:
        return problem + " (the save was interrupted)" if problem.startswith("no ") else problem
    from wemask_cli.interventions import INTERVENTIONS_FILE, load_saved
    from wemask_cli.method.config import WeMaskConfig

    for name, read in ((CONFIG_NAME, WeMaskConfig.load), (INTERVENTIONS_FILE, load_saved)):
        if (path / name).exists():
            try:
                read(path)
            except (ValueError, OSError, WeMaskError) as err:
                return f"{name} is torn or invalid ({first_line(err, 120)})"
    problem = _adapter_problem(path)
    if problem:
        return problem
    if ours:
        problem = _read_json(path / RUN_RECORD_FILE)
        if problem:
            return problem + (" (the save was interrupted before wemask's record)" if problem.startswith("no ") else "")
    return None


def _adapter_problem(path: Path) -> str | None:
    """Why the checkpoint's LoRA adapter cannot be resumed from (unreadable, NaN or infinity); None: it can."""
    if not (path / ADAPTER_WEIGHTS_FILE).is_file():
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from wemask_cli.runtime.finite import first_non_finite

    try:
        name = first_non_finite(load_file(str(path / ADAPTER_WEIGHTS_FILE)).items())
    except (SafetensorError, OSError) as err:
        return f"{ADAPTER_WEIGHTS_FILE} is torn ({first_line(err, 120)})"
    return f"{ADAPTER_WEIGHTS_FILE}: tensor {name} holds NaN or infinity" if name else None


def checkpoints(directory: Path) -> list[Path]:
    """checkpoint-N folders, newest first."""
    found = [(int(c.name.rpartition("-")[2]), c) for c in directory.glob(f"{PREFIX}-*") if c.is_dir() and c.name.rpartition("-")[2].isdigit()]
    return [path for _, path in sorted(found, reverse=True)]


def resume_checkpoint(directory: Path) -> str | None:
    """The newest complete checkpoint of a run to --resume (None: nothing there, a new run starts)."""
    if (directory / METRICS_FILE).is_file():
        raise WeMaskError(
            f"--resume: {directory} holds a finished run ({METRICS_FILE}); to train further start a new run with "
            f"--model {directory}, or pass --overwrite to replace it"
        )
    skipped = []
    for path in checkpoints(directory):
        problem = checkpoint_problem(path)
        if problem is None:
            for name, why in skipped:
                say(f"--resume: skipping {name}: {why}; resuming from {path.name}, the newest complete checkpoint")
            return str(path)
        skipped.append((path.name, problem))
    if skipped or any(c.name not in OURS for c in directory.iterdir()):
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped)
        raise WeMaskError(
            f"--resume: {directory} has no complete checkpoint-N to resume from" + (f" ({reasons})" if reasons else "")
            + "; pass --overwrite to start over"
        )
    say(f"--resume: nothing to resume in {directory}: starting a new run")
    return None


def agreed_checkpoint(directory: Path) -> str | None:
    """`resume_checkpoint` decided by the main process and sent to all (each node would otherwise pick from its own
    disk); every process must be able to read that checkpoint, else all stop: one line from the main process naming
    the ranks that cannot, and one from each of those ranks."""
    from wemask_cli.runtime.ranks import from_main, gather

    chosen = from_main(lambda: resume_checkpoint(directory))
    problem = None
    if chosen:
        problem = _read_json(Path(chosen) / TRAINER_STATE) if Path(chosen).is_dir() else "no such folder"
    missing = [str(r) for r, why in enumerate(gather(problem)) if why]
    if problem:
        raise WeMaskError(f"--resume: {chosen}, the checkpoint rank 0 resumes from, is not readable on this node ({problem})")
    if missing:
        raise WeMaskError(
            f"--resume: rank 0 resumes from {chosen}, which rank(s) {', '.join(missing)} cannot read: the output folder "
            "must be on a file system all nodes share (or every node must hold the same checkpoints)"
        )
    return chosen


def claim_run_folder(output: Path, opts: dict, args, kind: str) -> tuple[OutputClaim, str | None]:
    """Claim the output folder (refusing what must be refused) and pick the checkpoint to resume from."""
    explicit = getattr(args, "resume_from_checkpoint", None)  # TRL's own --resume-from-checkpoint PATH
    inside = False
    if explicit:
        problem = checkpoint_problem(Path(explicit), ours=False)
        if problem:
            raise WeMaskError(f"--resume-from-checkpoint {explicit}: not a complete checkpoint ({problem})")
        inside = Path(explicit).resolve().parent == output.resolve()
        if inside and opts["overwrite"]:
            raise WeMaskError(f"--overwrite would delete {explicit}, the checkpoint to resume from: drop one of them")
    resume = bool(opts["resume"]) or inside
    claim = claim_output_dir(output, overwrite=bool(opts["overwrite"]), resume=resume, kind=kind, resumable=True)
    try:
        barrier(args)  # every process sees the folder the main process claimed (cleared later, once inputs are checked)
        resume_from = str(explicit) if explicit else agreed_checkpoint(output) if opts["resume"] else None
    except BaseException:
        claim.release(failed=True)
        raise
    return claim, resume_from


SCHEDULE_FIELDS = ("max_steps", "num_train_epochs", "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio",
                   "per_device_train_batch_size", "gradient_accumulation_steps")


def warn_schedule_change(resume_from: str | None, args) -> None:
    """One warning when --resume continues with settings that shape the learning-rate schedule changed (the
    scheduler is restored from the checkpoint, so a new --max-steps bends the curve from here on)."""
    if not resume_from:
        return
    try:
        started = json.loads((Path(resume_from) / RUN_RECORD_FILE).read_text()).get("trl_args") or {}
    except (OSError, ValueError):  # checked complete when chosen; a missing record only loses this warning
        return
    now = args.to_dict()  # the form the record was written in (enums as their values)
    changed = [f"{name} {started[name]} -> {now[name]}" for name in SCHEDULE_FIELDS
               if name in started and name in now and started[name] != now[name]]
    if changed:
        from wemask_cli.runtime.progress import warn

        warn(f"--resume changes the learning-rate schedule of the run ({'; '.join(changed)}): the restored scheduler "
             "continues with the new settings; resume with the run's own flags to keep its curve")
