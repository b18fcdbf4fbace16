"""`wemask kto`: TRL's KTOTrainer through the shared training run (run.py), on unpaired feedback (data/unpaired.py).

KTO compares the policy with a reference, as DPO does, so it declares the same reference policy ("choose":
`--ref-mask same|none`, reference.py): in aware mode the reference computes with the policy's mask by default, so
the first step's rewards are 0. free mode trains plain KTO and records the mask for inference. This module and its
data declaration are the whole stage: nothing else in wemask names it but the built-in list.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext

from wemask_cli.data.unpaired import UNPAIRED
from wemask_cli.runtime import progress
from wemask_cli.train.reference import masked_layers_record, reference_kind
from wemask_cli.train.stage_base import Stage, TrainContext
from wemask_cli.train.stage_registry import STAGES, StageSpec

FIRST_STEP_KEYS = ("loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected")
STAGE = STAGES.register(StageSpec(
    "kto",
    """Unpaired preference tuning with TRL's KTOTrainer and WeMask (data: prompt/completion/label | prompt/chosen/rejected pairs, unpaired).

    A label is true for a desirable completion and false for an undesirable one; preference pairs become one row of
    each. The reference model follows --ref-mask (as in dpo). Outputs as in sft: wemask_config.json,
    wemask_run.json, metrics.json (with the first step's rewards and KL). TRL's KTO options pass through: --beta,
    --desirable-weight, --undesirable-weight, --loss-type, --max-length, --precompute-ref-log-probs, ... (the KL term
    needs --per-device-train-batch-size 2 or more).
    """,
    "wemask_cli.train.kto:KTOStage",
    "trl:KTOConfig",
    UNPAIRED,
    reference="choose",
))


class KTOStage(Stage):
    spec = STAGE

    def build_trainer(self, ctx: TrainContext):
        """TRL's KTOTrainer; with --precompute-ref-log-probs and a masked reference, the mask goes on first."""
        from trl import KTOTrainer

        self.reference.resolve(ctx.options)  # recorded in wemask_run.json
        one_sided = warn_one_sided(ctx.train_dataset["label"])
        train_dataset, eval_dataset = self.reference.before_trainer(ctx, ctx.train_dataset, ctx.eval_dataset)
        with without_weight_advice(KTOTrainer.__module__) if one_sided else nullcontext():
            trainer = KTOTrainer(
                model=ctx.model, args=ctx.args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                processing_class=ctx.tokenizer, peft_config=ctx.peft_config, callbacks=ctx.callbacks,
            )
        self.reference.after_trainer(trainer)
        return trainer

    def extra_metrics(self, trainer) -> dict:
        """The reference policy, the layers WeMask hooks on the policy and on a separate reference (None: there is
        none), and the first logged step (its rewards are 0 with --ref-mask same)."""
        first = next((entry for entry in trainer.state.log_history if "kl" in entry or "rewards/chosen" in entry), {})
        return {
            "ref_mask": self.reference.ref_mask,
            "reference": reference_kind(trainer),
            "masked_layers": masked_layers_record(trainer),
            "first_step": {key: first[key] for key in FIRST_STEP_KEYS if key in first},
        }


def warn_one_sided(labels: list[bool]) -> bool:
    """One line when every training row has the same label (TRL trains on it, only warning about the weights)."""
    if not labels or len(set(labels)) > 1:
        return False
    side, other = ("true (desirable)", "false (undesirable)") if labels[0] else ("false (undesirable)", "true (desirable)")
    progress.warn(
        f"kto: all {len(labels)} training rows are labelled {side}, none {other}: KTO trains on one side only (TRL's "
        "advice on --desirable-weight/--undesirable-weight does not apply then, and is left out); add rows labelled "
        f"{other.split()[0]} for the usual KTO"
    )
    return True


class _DropWeightAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "amounts of desirable/positive and undesirable/negative" not in str(record.msg)


@contextmanager
def without_weight_advice(module: str):
    """TRL's advice on --desirable-weight/--undesirable-weight off while the trainer is built: with one label only, it
    compares against a count of 1 it makes up."""
    logger, drop = logging.getLogger(module), _DropWeightAdvice()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
