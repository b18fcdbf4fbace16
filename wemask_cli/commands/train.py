"""`wemask sft|dpo|grpo|kto|rloo` and a plugin's trainer stage: the work behind every training command, rich-free.

cli/train.py builds each command's flags from what this module hands it (the stages' declarations, wemask's
training options, TRL's spellings of them) and calls `run_training` once; the machinery is train/ (the stages in
train/stage_registry.py, the shared run in train/run.py). Imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass

from wemask_cli.runtime.launch import SHOWN as SHOWN_LAUNCH_FLAGS
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.stage_registry import StageSpec, builtin_specs, plugin_stage_names, stage_specs
from wemask_cli.train.trl_vocabulary import alias_flags, trl_spellings

__all__ = [
    "SHOWN_LAUNCH_FLAGS", "StageSpec", "TrainOptions", "Training", "alias_flags", "builtin_specs", "plugin_stage_names",
    "run_training", "stage_specs", "trl_completions", "trl_spellings",
]


@dataclass(frozen=True)
class Training:
    """What a training command did: printed TRL's options (`trl_help`), trained (`stopped_by` a signal, SIGINT or
    SIGTERM, after saving `checkpoint`), or launched the processes that trained (`exit_code`: theirs)."""

    trl_help: str | None = None
    stopped_by: int | None = None
    checkpoint: str | None = None
    exit_code: int = 0


def run_training(spec: StageSpec, options: dict, stage_options: dict, intervention_options: dict, extra_args: list[str],
                 own_flags: list[str], help_trl: bool = False, launch_options: dict | None = None) -> Training:
    """Check the mask flags, TRL's pass-through flags, the data and the model (before torch is imported), then list
    TRL's options (`help_trl`), start the run through accelerate (a launch flag given: runtime/launch.py), or train the
    stage `spec` declares with the shared run."""
    from wemask_cli.mask_request.flags import MaskRequest

    MaskRequest.from_options(options)  # a typo answers before torch is imported
    from wemask_cli.runtime import launch
    from wemask_cli.train.trl_flags import check_extra_args, trl_flags

    launch_flags, extra_args = launch.launch_flags_in(launch_options or {}, extra_args, own_flags, trl_flags(spec.trl_config) or ())
    check_extra_args(extra_args, spec.name, spec.trl_config, own_flags)
    if launch_flags is not None and not help_trl:
        return Training(exit_code=launch.launch(launch_flags))  # the launched processes check the rest
    settings = TrainOptions(**options, stage_options=stage_options, intervention_options=intervention_options)
    if not help_trl:
        from wemask_cli.train.preflight import preflight

        preflight(spec, settings, extra_args)  # the data, the model and --use-vllm, before torch and TRL are imported
    from wemask_cli.train.resolve import trl_help
    from wemask_cli.train.run import run

    stage = spec.load()()
    if help_trl:
        return Training(trl_help=trl_help(stage))
    result = run(stage, settings, extra_args)
    return Training(stopped_by=result.stopped_by, checkpoint=result.checkpoint)


def trl_completions(stage_name: str, incomplete: str) -> list[str]:
    """TRL's options of the stage that start with `incomplete`, dashed (`--learning-rate`), for shell completion."""
    from wemask_cli.train.trl_flags import trl_flags

    spec = stage_specs(stage_name).get(stage_name)
    flags = trl_flags(spec.trl_config) if spec is not None else None
    return sorted(flag for flag in flags or () if "_" not in flag and flag.startswith(incomplete))
