"""`wemask sft`: TRL's SFTTrainer through the shared training path (train/common.py). Thin on purpose."""

from __future__ import annotations

from .common import Stage, TrainContext


def build_trainer(ctx: TrainContext):
    from trl import SFTTrainer

    return SFTTrainer(
        model=ctx.model,
        args=ctx.args,
        train_dataset=ctx.train_dataset,
        eval_dataset=ctx.eval_dataset,
        processing_class=ctx.tokenizer,
        peft_config=ctx.peft_config,
        callbacks=ctx.callbacks,
    )


def stage() -> Stage:
    from trl import SFTConfig

    return Stage(name="sft", config_class=SFTConfig, build_trainer=build_trainer)

