"""The `Stage` base class: how one training command (sft, dpo, grpo, a plugin's) plugs into the shared run (run.py).

A stage is an object with per-instance state, declared by its `spec` (stage_registry.StageSpec: name, data, own flags,
reference policy): `check` runs before anything loads, `build_trainer(ctx)` builds the TRL trainer, `install(trainer,
ctx)` puts the interventions on the trained model (and, per the spec's reference policy, on the reference model:
reference.py), `extra_metrics(trainer)` adds keys to metrics.json. Subclasses: sft.SFTStage, dpo.DPOStage,
grpo.GRPOStage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say
from wemask_cli.train.reference import Reference, check_ref_mask
from wemask_cli.train.stage_registry import StageSpec


@dataclass
class TrainContext:
    """Everything a stage needs to build its trainer; `callbacks` must be passed to the trainer."""

    options: dict  # resolved wemask options (TrainOptions fields + the stage's own)
    args: Any  # the TRL config (SFTConfig, DPOConfig, GRPOConfig)
    loaded: Any  # models.LoadedModel
    train_dataset: Any
    eval_dataset: Any
    data_format: Any  # data.DataFormat
    peft_config: Any  # peft.LoraConfig or None
    wemask: WeMaskConfig  # requested config (dims not chosen yet, unless resumed)
    callbacks: list = field(default_factory=list)
    remedies: list = field(default_factory=list)  # intervention configs other than WeMask (GatedNorm, ...)
    remedy_weights: dict = field(default_factory=dict)  # their starting weights (a resumed or continued run's)
    diagnostics: Any = None  # diagnostics.Diagnostics with --log-diagnostics (one of `callbacks` too), else None

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer


class Stage:
    """One training command. Subclasses set `spec` and implement `build_trainer`."""

    spec: ClassVar[StageSpec]
    trl_defaults: ClassVar[dict] = {}  # stage defaults for TRL fields (below recipe and flags)

    def __init__(self) -> None:
        self.installation = None  # what install() put on the models (see install.py)
        self.dropped = 0  # training rows the trainer's preprocessing dropped (metrics.json: dropped_examples)
        self.reference = Reference(self.spec.reference, self.spec.name) if self.spec.reference != "none" else None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def trl_config(self) -> str:
        return self.spec.trl_config

    @property
    def option_defaults(self) -> dict:
        """The stage's own wemask options and their defaults (settable in a recipe)."""
        return {flag.dest: flag.default for flag in self.spec.all_flags()}

    @property
    def option_kinds(self) -> dict:
        """Their types, for recipe validation."""
        return {flag.dest: flag.kinds for flag in self.spec.all_flags()}

    def config_class(self) -> type:
        return self.spec.config_class()

    def check(self, resolved) -> None:
        """Fail fast, before data or model load: `resolved` is resolve.Resolved (opts, args, mask)."""
        if self.spec.reference == "choose":
            check_ref_mask(resolved.opts)

    def build_trainer(self, ctx: TrainContext):
        raise NotImplementedError

    def install(self, trainer, ctx: TrainContext) -> WeMaskConfig:
        """Put WeMask (and the other interventions) on the model TRL trains, and on its reference per the spec's
        policy; returns the WeMask config with dims."""
        from wemask_cli.train.install import install_on_policy

        self.installation = self.reference.install(trainer, ctx) if self.reference else install_on_policy(trainer, ctx)
        return self.installation.wemask

    def extra_metrics(self, trainer) -> dict:
        return {}

    def report_kept(self, before: int, trainer, reason: str, empty: str) -> None:
        """Say how many rows the trainer's preprocessing dropped (one line when none is left)."""
        dataset = getattr(trainer, "train_dataset", None)
        if dataset is None or not hasattr(dataset, "__len__"):
            return
        kept = len(dataset)
        if kept == 0:
            raise WeMaskError(empty)
        if kept < before:
            self.dropped = before - kept
            say(f"{self.name}: {before - kept} of {before} examples dropped: {reason}")
