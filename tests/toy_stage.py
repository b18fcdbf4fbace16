"""A trainer stage declared outside wemask_cli, found through the `wemask.stages` entry point group
(tests/test_stage_plugin.py): TRL's SFTTrainer under the name toy-sft, with one own flag, --toy-note."""

from __future__ import annotations

from wemask_cli.data import SUPERVISED
from wemask_cli.train.stage_base import Stage
from wemask_cli.train.stage_registry import StageFlag, StageSpec

STAGE = StageSpec(
    "toy-sft",
    "Toy supervised fine-tuning from a plugin (TRL's SFTTrainer; data as for sft).",
    "toy_stage:ToySFTStage",
    "trl:SFTConfig",
    SUPERVISED,
    flags=(StageFlag("toy_note", str, "A note this stage copies into metrics.json.", default="plain"),),
)


class ToySFTStage(Stage):
    spec = STAGE

    def build_trainer(self, ctx):
        from trl import SFTTrainer

        self.note = ctx.options["toy_note"]
        return SFTTrainer(
            model=ctx.model, args=ctx.args, train_dataset=ctx.train_dataset, processing_class=ctx.tokenizer,
            peft_config=ctx.peft_config, callbacks=ctx.callbacks,
        )

    def extra_metrics(self, trainer) -> dict:
        return {"toy_note": self.note}
