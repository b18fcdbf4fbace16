"""`wemask dpo`: TRL's DPOTrainer through the shared training run (run.py), with a deliberate
reference-model policy.

DPO's implicit reward is `beta * (log pi(y|x) - log pi_ref(y|x))`. If the policy computes with WeMask and the
reference does not, the two differ before the first update and every reward starts biased. `--ref-mask` decides:

- `same` (default in aware mode): the reference computes with the policy's mask, so at step 0 the chosen and
  rejected rewards are exactly 0 and DPO only measures what training changed.
  * PEFT: TRL's reference is the policy with its adapter disabled (or TRL's frozen "ref" adapter): the same
    module tree, so it runs the same hooks by construction.
  * full fine-tuning: TRL loads a separate reference model from the policy's path (`config._name_or_path`,
    the converted cache directory for the embedded model): the hook, with the policy's dims, is installed on it too.
  * `--precompute-ref-log-probs`: TRL computes the reference log-probs while the trainer is built, so the mask is
    installed on the model before that, and the dataset fingerprint names the mask (TRL's cache key hashes the
    weights only, and would otherwise hand an unmasked run's cached reference log-probs to a masked run).
- `none`: the reference is the unmasked starting model. With PEFT the reference pass runs through the policy's own
  hooked modules, so the hooks are installed with a predicate (`active=`) that is false while the adapter is
  disabled (or the "ref" adapter is active), i.e. during exactly TRL's reference forward.

free mode trains plain DPO (policy and reference unmasked) and records the mask for inference.
`stage.installation.remove()` removes WeMask from the policy and from a separate reference model alike.
"""

from __future__ import annotations

from typing import Any

from ..errors import WeMaskError
from ..method.config import WeMaskConfig
from ..progress import say
from .install import PolicyPass, install_mask, install_on_policy, install_on_reference, is_peft
from .stage import Stage, TrainContext

REF_MASKS = ("same", "none")
HH_ASSISTANT = "\n\nAssistant:"


# ---------------------------------------------------------------------------------------------------------------
# Options


def resolve_ref_mask(opts: dict) -> str:
    """The reference policy: given, else 'same' in aware mode and 'none' (plain DPO) in free mode."""
    given = opts.get("ref_mask")
    if given is None:
        return "same" if opts.get("mode") == "aware" else "none"
    return given


def check(opts: dict) -> None:
    """Fail fast, before data or model load."""
    given = opts.get("ref_mask")
    if given is not None and given not in REF_MASKS:
        raise WeMaskError(
            f"--ref-mask {given!r} is not valid: use same (the reference computes with the policy's mask) or none "
            "(unmasked reference)"
        )
    if given == "same" and opts.get("mode") == "free":
        raise WeMaskError(
            "--ref-mask same needs --mode aware: free mode trains plain DPO (policy and reference unmasked) and applies "
            "the mask only at inference; drop --ref-mask or use --mode aware"
        )


# ---------------------------------------------------------------------------------------------------------------
# Data


def split_implicit_prompt(example: dict) -> dict:
    """chosen/rejected full conversations (the HH-RLHF layout) -> prompt/chosen/rejected.

    Conversations: the shared leading messages are the prompt; each completion keeps at least its last message.
    Strings: the common prefix, cut after its last '\\n\\nAssistant:' (HH-RLHF transcripts) or else at its last
    whitespace, so no word is split between prompt and completion (TRL's own extraction cuts mid-word).
    """
    from ..data import is_conversation

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
    from ..data import is_conversation

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
            dataset = dataset.map(split_implicit_prompt, desc="Extracting the shared prompt")
    check_layout(dataset[0], where)
    return dataset


def name_masked_reference(dataset, config: WeMaskConfig):
    """Make TRL's precomputed-reference cache key depend on the mask (it hashes the dataset and the weights only)."""
    if dataset is None or not hasattr(dataset, "_fingerprint"):
        return dataset
    from datasets.fingerprint import Hasher

    dataset._fingerprint = Hasher.hash([dataset._fingerprint, "wemask-masked-reference", config.to_dict()])
    return dataset


# ---------------------------------------------------------------------------------------------------------------
# The reference model


def reference_kind(trainer) -> str:
    if trainer.precompute_ref_logps:
        return "precomputed"
    if trainer.ref_model is None and is_peft(trainer.model):
        return "adapter-disabled policy" if "ref" not in trainer.model.peft_config else "frozen 'ref' adapter"
    return "separate model"


# ---------------------------------------------------------------------------------------------------------------
# The stage


class DPOStage(Stage):
    name = "dpo"
    trl_config = "DPOConfig"
    option_defaults = {"ref_mask": None}
    option_kinds = {"ref_mask": str}

    def __init__(self) -> None:
        super().__init__()
        self.ref_mask: str | None = None
        self.preinstalled = None  # the policy's mask, installed before TRL precomputes reference log-probs

    def check(self, resolved) -> None:
        check(resolved.opts)

    def build_trainer(self, ctx: TrainContext):
        """TRL's DPOTrainer; with --precompute-ref-log-probs and a masked reference, the mask goes on first."""
        from trl import DPOTrainer

        args, config = ctx.args, ctx.wemask
        self.ref_mask = ctx.options["ref_mask"] = resolve_ref_mask(ctx.options)  # recorded in wemask_run.json
        train_dataset = prepare_preferences(ctx.train_dataset, args, f"--dataset {ctx.options['dataset']}")
        eval_dataset = prepare_preferences(ctx.eval_dataset, args, f"--eval-dataset {ctx.options['eval_dataset']}")
        model = ctx.model
        peft = ctx.peft_config is not None or is_peft(model)
        if not peft and not args.precompute_ref_log_probs:
            # TRL loads the reference from the policy's path: make it the directory (or hub id) the weights came from.
            model.config._name_or_path = ctx.loaded.source
        if args.precompute_ref_log_probs and config.mode == "aware" and config.active and self.ref_mask == "same":
            self.preinstalled = install_mask(model, config)
            train_dataset = name_masked_reference(train_dataset, self.preinstalled.wemask)
            eval_dataset = name_masked_reference(eval_dataset, self.preinstalled.wemask)
        trainer = DPOTrainer(
            model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
            processing_class=ctx.tokenizer, peft_config=ctx.peft_config, callbacks=ctx.callbacks,
        )
        if self.preinstalled is not None and trainer.is_fsdp_enabled:
            raise WeMaskError(
                "--precompute-ref-log-probs with --ref-mask same is not supported under FSDP (TRL precomputes with a "
                "separate reference model before WeMask can be installed on it): drop --precompute-ref-log-probs"
            )
        self.report_kept(
            len(train_dataset), trainer, f"their prompt fills --max-length {args.max_length}",
            f"every example's prompt fills --max-length {args.max_length} tokens, so no completion token is left "
            "to train on: raise --max-length, or use --truncation-mode keep_end",
        )
        return trainer

    def install(self, trainer, ctx: TrainContext) -> WeMaskConfig:
        """The policy as in every stage, then the reference per --ref-mask. Under PEFT the reference pass runs
        through the policy's modules: an unmasked reference (and the remedies, trained) step aside during it."""
        if self.preinstalled is not None:
            self.preinstalled.remove()  # installed again below with the same recorded dims
            ctx.wemask = self.preinstalled.wemask
        aware = ctx.wemask.mode == "aware" and ctx.wemask.active
        peft_reference = trainer.ref_model is None and is_peft(trainer.model)
        policy_pass = PolicyPass(trainer.model) if peft_reference and ((aware and self.ref_mask == "none") or ctx.remedies) else None
        self.installation = install_on_policy(
            trainer, ctx, mask_active=policy_pass if self.ref_mask == "none" else None, remedies_active=policy_pass
        )
        config = self.installation.wemask
        install_on_reference(trainer, self.installation, mask=aware and self.ref_mask == "same")
        if config.active:
            where = reference_kind(trainer)
            state = "masked like the policy" if (aware and self.ref_mask == "same") else "unmasked"
            say(f"dpo reference ({where}): {state} (--ref-mask {self.ref_mask}{', free mode' if config.mode == 'free' else ''})")
        return config

    def extra_metrics(self, trainer) -> dict[str, Any]:
        """The reference policy, and the first logged step (its rewards are 0 with --ref-mask same)."""
        first = next((entry for entry in trainer.state.log_history if "rewards/chosen" in entry), {})
        keys = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected")
        return {
            "ref_mask": self.ref_mask,
            "reference": reference_kind(trainer),
            "first_step": {key: first[key] for key in keys if key in first},
        }
