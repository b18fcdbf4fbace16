"""`wemask sft`: TRL's SFTTrainer through the shared training run (run.py). Thin on purpose."""

from __future__ import annotations

from .stage import Stage, TrainContext


class SFTStage(Stage):
    name = "sft"
    trl_config = "SFTConfig"

    def build_trainer(self, ctx: TrainContext):
        from trl import SFTTrainer

        trainer = SFTTrainer(
            model=ctx.model,
            args=ctx.args,
            train_dataset=ctx.train_dataset,
            eval_dataset=ctx.eval_dataset,
            processing_class=ctx.tokenizer,
            peft_config=ctx.peft_config,
            callbacks=ctx.callbacks,
        )
        limit = ctx.args.max_length
        reason = f"truncated to --max-length {limit} tokens, nothing of their completion is left to train on"
        empty = (
            f"every example lost its whole completion to --max-length {limit} (truncation {ctx.args.truncation_mode}): "
            "nothing is left to train on; raise --max-length or use --truncation-mode keep_end"
        )
        # packing merges rows, so only an empty result says something then
        self.report_kept(len(ctx.train_dataset) if not ctx.args.packing else 1, trainer, reason, empty)
        return trainer
