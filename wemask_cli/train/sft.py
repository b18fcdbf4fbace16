"""`wemask sft`: TRL's SFTTrainer through the shared training run (run.py). Thin on purpose."""

from __future__ import annotations

from ..data.formats import SUPERVISED
from .stage import Stage, TrainContext
from .stages import StageSpec

STAGE = StageSpec(
    "sft",
    """Supervised fine-tuning with TRL's SFTTrainer and WeMask (data: messages | prompt/completion | text).

    Every checkpoint and the output directory carry wemask_config.json (mode and dims) and wemask_run.json (resolved
    settings, versions, seed); the output also gets metrics.json. `wemask infer --model OUTPUT_DIR` applies the
    recorded mask. Ctrl-C saves a checkpoint; --resume continues from it.
    """,
    "wemask_cli.train.sft:SFTStage",
    "SFTConfig",
    SUPERVISED,
)


class SFTStage(Stage):
    spec = STAGE

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
