"""`wemask dpo`: TRL's DPOTrainer through the shared training run (run.py), with a deliberate
reference-model policy: `--ref-mask same|none` (declared as reference "choose", implemented in reference.py, shared
with GRPO). free mode trains plain DPO (policy and reference unmasked) and records the mask for inference.
`stage.installation.remove()` removes WeMask from the policy and from a separate reference model alike.
"""

from __future__ import annotations

from typing import Any

from wemask_cli.data.formats import PREFERENCE
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.reference import reference_kind
from wemask_cli.train.stage_base import Stage, TrainContext
from wemask_cli.train.stage_registry import STAGES, StageSpec

HH_ASSISTANT = "\n\nAssistant:"
STAGE = STAGES.register(StageSpec(
    "dpo",
    """Preference tuning with TRL's DPOTrainer and WeMask (data: prompt/chosen/rejected | chosen/rejected with an implicit prompt, the HH-RLHF layout).

    The reference model follows --ref-mask (see its help); full fine-tuning loads it from the model's path, LoRA
    uses the adapter-disabled policy. Outputs as in sft: wemask_config.json, wemask_run.json, metrics.json (with the
    first step's rewards). TRL's DPO options pass through: --beta, --loss-type, --max-length,
    --precompute-ref-log-probs, ...
    """,
    "wemask_cli.train.dpo:DPOStage",
    "trl:DPOConfig",
    PREFERENCE,
    reference="choose",
))


# ---------------------------------------------------------------------------------------------------------------
# Data


def split_implicit_prompt(example: dict, index: int | None = None) -> dict:
    """chosen/rejected full conversations (the HH-RLHF layout) -> prompt/chosen/rejected.

    Conversations: the shared leading messages are the prompt; each completion keeps at least its last message.
    Strings: the common prefix, cut after its last '\\n\\nAssistant:' (HH-RLHF transcripts) or else at its last
    whitespace, so no word is split between prompt and completion (TRL's own extraction cuts mid-word).
    """
    from wemask_cli.data import is_conversation

    chosen, rejected = example["chosen"], example["rejected"]
    if is_conversation(chosen) and is_conversation(rejected):
        shared = 0
        for a, b in zip(chosen, rejected):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(chosen) - 1, len(rejected) - 1)
        if shared <= 0:
            raise WeMaskError(
                "a chosen/rejected pair shares no leading message, so there is no implicit prompt to extract: "
                "give a prompt column (prompt/chosen/rejected) instead"
            )
        firsts = {chosen[shared].get("role"), rejected[shared].get("role")} if isinstance(chosen[shared], dict) else set()
        if firsts != {"assistant"}:
            row = "" if index is None else f"row {index + 1}: "
            raise WeMaskError(
                f"{row}chosen and rejected continue the conversation differently after message {shared} (they differ "
                f"in a {' and a '.join(sorted(str(r) for r in firsts - {'assistant'}))} turn, not only in the assistant's "
                "reply): a preference pair must share everything before the replies it compares; fix the pair or give a "
                "prompt column"
            )
        return {"prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}
    if isinstance(chosen, str) and isinstance(rejected, str):
        import os.path

        head = os.path.commonprefix([chosen, rejected])
        if head == chosen or head == rejected:  # one is a prefix of the other: cut at the last turn or word anyway
            head = head[:-1]
        marker = head.rfind(HH_ASSISTANT)
        if marker >= 0:
            cut = marker + len(HH_ASSISTANT)
        else:
            cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
            cut = cut if cut > 0 else len(head)
        if cut <= 0:
            raise WeMaskError(
                "a chosen/rejected pair shares no leading text, so there is no implicit prompt to extract: "
                "give a prompt column (prompt/chosen/rejected) instead"
            )
        return {"prompt": chosen[:cut], "chosen": chosen[cut:], "rejected": rejected[cut:]}
    raise WeMaskError(
        "chosen and rejected must both be strings or both be conversations (lists of {'role', 'content'} messages), "
        f"not {type(chosen).__name__} and {type(rejected).__name__}"
    )


def check_layout(example: dict, where: str) -> None:
    """prompt/chosen/rejected: all strings, or all conversations (TRL decides per dataset from its first row)."""
    from wemask_cli.data import is_conversation

    kinds = {
        key: "conversation" if is_conversation(example[key]) else type(example[key]).__name__
        for key in ("prompt", "chosen", "rejected")
    }
    if set(kinds.values()) not in ({"str"}, {"conversation"}):
        found = ", ".join(f"{key} is a {kind}" for key, kind in kinds.items())
        raise WeMaskError(
            f"{where}: prompt, chosen and rejected must be all strings or all conversations of {{'role', 'content'}} "
            f"messages ({found})"
        )


def prepare_preferences(dataset, args, where: str):
    """The dataset as TRL's prompt/chosen/rejected, the implicit prompt made explicit."""
    if dataset is None:
        return None
    if "prompt" not in dataset.column_names:
        with args.main_process_first(desc="extracting implicit prompts"):
            dataset = dataset.map(split_implicit_prompt, with_indices=True, desc="Extracting the shared prompt")
    check_layout(dataset[0], where)
    return dataset


# ---------------------------------------------------------------------------------------------------------------
# The stage


class DPOStage(Stage):
    spec = STAGE

    @property
    def ref_mask(self) -> str | None:
        return self.reference.ref_mask

    def build_trainer(self, ctx: TrainContext):
        """TRL's DPOTrainer; with --precompute-ref-log-probs and a masked reference, the mask goes on first."""
        from trl import DPOTrainer

        args = ctx.args
        self.reference.resolve(ctx.options)  # recorded in wemask_run.json
        train_dataset = prepare_preferences(ctx.train_dataset, args, f"--dataset {ctx.options['dataset']}")
        eval_dataset = prepare_preferences(ctx.eval_dataset, args, f"--eval-dataset {ctx.options['eval_dataset']}")
        train_dataset, eval_dataset = self.reference.before_trainer(ctx, train_dataset, eval_dataset)
        trainer = DPOTrainer(
            model=ctx.model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
            processing_class=ctx.tokenizer, peft_config=ctx.peft_config, callbacks=ctx.callbacks,
        )
        self.reference.after_trainer(trainer)
        self.report_kept(
            len(train_dataset), trainer, f"their prompt fills --max-length {args.max_length}",
            f"every example's prompt fills --max-length {args.max_length} tokens, so no completion token is left "
            "to train on: raise --max-length, or use --truncation-mode keep_end",
        )
        return trainer

    def extra_metrics(self, trainer) -> dict[str, Any]:
        """The reference policy, and the first logged step (its rewards are 0 with --ref-mask same)."""
        first = next((entry for entry in trainer.state.log_history if "rewards/chosen" in entry), {})
        keys = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected")
        return {
            "ref_mask": self.ref_mask,
            "reference": reference_kind(trainer),
            "first_step": {key: first[key] for key in keys if key in first},
        }
