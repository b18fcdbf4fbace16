"""`wemask sft`: TRL's SFTTrainer through the shared training run (run.py). Thin on purpose."""

from __future__ import annotations

from wemask_cli.data.formats import SUPERVISED
from wemask_cli.runtime.progress import say
from wemask_cli.train.stage_base import Stage, TrainContext
from wemask_cli.train.stage_registry import STAGES, StageFlag, StageSpec

STAGE = STAGES.register(StageSpec(
    "sft",
    """Supervised fine-tuning with TRL's SFTTrainer and WeMask (data: messages | prompt/completion | text).

    Every checkpoint and the output directory carry wemask_config.json (mode and dims) and wemask_run.json (resolved
    settings, versions, seed); the output also gets metrics.json. `wemask infer --model OUTPUT_DIR` applies the
    recorded mask. Ctrl-C saves a checkpoint; --resume continues from it.
    """,
    "wemask_cli.train.sft:SFTStage",
    "trl:SFTConfig",
    SUPERVISED,
    flags=(
        StageFlag(
            "train_on_prompt", bool,
            "Train on the prompts too (LLaMA-Factory's train_on_prompt). Default: the loss covers the responses only, "
            "the assistant replies of conversations (TRL's assistant_only_loss) and the completions of prompt/completion "
            "rows (TRL's completion_only_loss).",
            default=False,
        ),
    ),
))


class SFTStage(Stage):
    spec = STAGE

    def build_trainer(self, ctx: TrainContext):
        from trl import SFTTrainer

        from wemask_cli.train.chat_templates import configure_response_loss

        say(f"sft: the loss covers {configure_response_loss(ctx)}")
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
