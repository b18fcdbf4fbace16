"""The reference model of a stage that has one (DPO, GRPO, a future KTO): its mask, shared by every such stage.

A preference or RL loss compares the policy with a reference, e.g. DPO's reward `beta * (log pi(y|x) -
log pi_ref(y|x))`. If the policy computes with WeMask and the reference does not, the two differ before the first
update. A stage declares its policy (`StageSpec.reference`): "same" (GRPO) always masks the reference like the
policy in aware mode; "choose" (DPO) adds `--ref-mask`:

- `same` (default in aware mode): the reference computes with the policy's mask, so at step 0 the rewards are 0.
  * PEFT: TRL's reference is the policy with its adapter disabled (or TRL's frozen "ref" adapter): the same
    module tree, so it runs the same hooks by construction.
  * full fine-tuning: TRL loads a separate reference model from the policy's path (`config._name_or_path`,
    the converted cache directory for the embedded model): the hook, with the policy's dims, is installed on it too.
  * `--precompute-ref-log-probs`: TRL computes the reference log-probs while the trainer is built, so the mask is
    installed on the model before that, and the dataset fingerprint names the mask (TRL's cache key hashes the
    weights only, and would otherwise hand an unmasked run's cached reference log-probs to a masked run).
- `none`: the reference is the unmasked starting model. With PEFT the reference pass runs through the policy's own
  hooked modules, so the hooks are installed with a predicate (`PolicyPass`) that is false while the adapter is
  disabled (or the "ref" adapter is active), i.e. during exactly TRL's reference forward.

free mode trains plain (policy and reference unmasked) and records the mask for inference. The remedies go on a
separate reference with their starting weights, frozen; under PEFT they step aside during the reference pass.
"""

from __future__ import annotations

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import say
from wemask_cli.train.install import StageInstallation, install_mask, install_on_policy, is_peft

REF_MASKS = ("same", "none")


def check_ref_mask(opts: dict) -> None:
    """--ref-mask: fail fast, before data or model load."""
    given = opts.get("ref_mask")
    if given is not None and given not in REF_MASKS:
        raise WeMaskError(
            f"--ref-mask {given!r} is not valid: use same (the reference computes with the policy's mask) or none "
            "(unmasked reference)"
        )
    if given == "same" and opts.get("mode") == "free":
        raise WeMaskError(
            "--ref-mask same needs --mode aware: free mode trains plain (policy and reference unmasked) and applies "
            "the mask only at inference; drop --ref-mask or use --mode aware"
        )


def resolve_ref_mask(opts: dict, policy: str) -> str:
    """The reference's mask: --ref-mask where the stage lets it be chosen ("choose"), else same in aware mode and
    none (plain training) in free mode."""
    given = opts.get("ref_mask") if policy == "choose" else None
    if given is None:
        return "same" if opts.get("mode") == "aware" else "none"
    return given


class PolicyPass:
    """A predicate for hooks on a PEFT model whose reference is the model itself (DPO, GRPO under LoRA): true while
    it runs as the policy, false during the reference pass (adapter disabled, or an adapter other than the trained
    one, TRL's frozen 'ref' copy, active)."""

    def __init__(self, peft_model):
        from peft.tuners.tuners_utils import BaseTunerLayer

        self.probe = next((m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)), None)
        if self.probe is None:
            raise WeMaskError(
                "a PEFT reference (the adapter-disabled policy) needs a LoRA-style adapter, and this PEFT model has no "
                "adapter layer: use LoRA, or --ref-mask same without remedies"
            )
        self.trained_adapter = peft_model.active_adapter  # PEFT switches all adapter layers together

    def __call__(self) -> bool:
        return not (bool(self.probe.disable_adapters) or self.trained_adapter not in self.probe.active_adapters)


def precomputes(trainer_or_args) -> bool:
    """Whether TRL computes the reference log-probs up front (DPO, KTO: --precompute-ref-log-probs)."""
    return bool(getattr(trainer_or_args, "precompute_ref_log_probs", False) or getattr(trainer_or_args, "precompute_ref_logps", False))


def reference_kind(trainer) -> str:
    if precomputes(trainer):
        return "precomputed"
    if getattr(trainer, "beta", None) == 0:  # GRPO's default: TRL builds and runs no reference
        return "none"
    if getattr(trainer, "ref_model", None) is None:
        if not is_peft(trainer.model):
            return "none"
        return "adapter-disabled policy" if "ref" not in trainer.model.peft_config else "frozen 'ref' adapter"
    return "separate model"


def masked_layers_record(trainer) -> dict:
    """The layers WeMask hooks on the policy and on a separate reference model (None: there is none), for metrics.json."""
    from wemask_cli.method.wemask_hook import masked_layers

    reference = getattr(trainer, "ref_model", None)
    unwrap = trainer.accelerator.unwrap_model
    return {"policy": masked_layers(unwrap(trainer.model)),
            "reference": masked_layers(unwrap(reference)) if reference is not None else None}


def name_masked_reference(dataset, config: WeMaskConfig):
    """Make TRL's precomputed-reference cache key depend on the mask (it hashes the dataset and the weights only)."""
    from wemask_cli.compat.datasets import fingerprint, set_fingerprint

    if fingerprint(dataset) is None:
        return dataset
    from datasets.fingerprint import Hasher

    set_fingerprint(dataset, Hasher.hash([fingerprint(dataset), "wemask-masked-reference", config.to_dict()]))
    return dataset


def install_on_reference(trainer, done: StageInstallation, *, mask: bool):
    """A separate reference model (TRL's `ref_model`) gets the policy's starting state: WeMask with the same dims
    (when `mask`) and the remedies with their starting weights, frozen. Returns it (None: no separate one)."""
    from wemask_cli.interventions import install_all

    reference = getattr(trainer, "ref_model", None)
    if reference is None:
        return None
    reference = trainer.accelerator.unwrap_model(reference)
    if mask and done.wemask.active and done.wemask.mode == "aware":
        done.installed.append(install_mask(reference, done.wemask))
    if done.remedies is not None:
        start = install_all(reference, done.remedies.configs, weights=done.remedies.state_dict())
        for parameter in start.parameters():
            parameter.requires_grad_(False)
        done.installed.append(start)
    return reference


class Reference:
    """The reference policy of one run: resolved at trainer build, installed with the policy's interventions."""

    def __init__(self, policy: str, stage: str) -> None:
        self.policy, self.stage = policy, stage  # StageSpec.reference ("same" | "choose") and the stage's name
        self.ref_mask: str | None = None
        self.preinstalled = None  # the policy's mask, installed before TRL precomputes reference log-probs

    def resolve(self, opts: dict) -> str:
        """The reference's mask, recorded in the options (wemask_run.json)."""
        self.ref_mask = resolve_ref_mask(opts, self.policy)
        if self.policy == "choose":
            opts["ref_mask"] = self.ref_mask
        return self.ref_mask

    def before_trainer(self, ctx, train_dataset, eval_dataset):
        """Before TRL builds the trainer: a separate reference loads from the weights' source; a precomputed masked
        reference needs the mask on the model now. Returns the datasets (renamed for TRL's cache when masked)."""
        args, config, model = ctx.args, ctx.wemask, ctx.model
        peft = ctx.peft_config is not None or is_peft(model)
        if not peft and not precomputes(args):
            # TRL loads the reference from the policy's path: make it the directory (or hub id) the weights came from.
            model.config.name_or_path = ctx.loaded.source
        if precomputes(args) and config.mode == "aware" and config.active and self.ref_mask == "same":
            self.preinstalled = install_mask(model, config)
            train_dataset = name_masked_reference(train_dataset, self.preinstalled.wemask)
            eval_dataset = name_masked_reference(eval_dataset, self.preinstalled.wemask)
        return train_dataset, eval_dataset

    def after_trainer(self, trainer) -> None:
        if self.preinstalled is not None and trainer.is_fsdp_enabled:
            raise WeMaskError(
                "--precompute-ref-log-probs with a masked reference is not supported under FSDP (TRL precomputes with a "
                "separate reference model before WeMask can be installed on it): drop --precompute-ref-log-probs"
            )

    def install(self, trainer, ctx) -> StageInstallation:
        """The policy as in every stage, then the reference per its mask. Under PEFT the reference pass runs
        through the policy's modules: an unmasked reference (and the remedies, trained) step aside during it."""
        if self.ref_mask is None:
            self.resolve(ctx.options)
        if self.preinstalled is not None:
            self.preinstalled.remove()  # installed again below with the same recorded dims
            ctx.wemask = self.preinstalled.wemask
        aware = ctx.wemask.mode == "aware" and ctx.wemask.active
        peft_reference = getattr(trainer, "ref_model", None) is None and is_peft(trainer.model)
        unmasked = aware and self.ref_mask == "none"
        policy_pass = PolicyPass(trainer.model) if peft_reference and (unmasked or ctx.remedies) else None
        done = install_on_policy(trainer, ctx, mask_active=policy_pass if self.ref_mask == "none" else None, remedies_active=policy_pass)
        install_on_reference(trainer, done, mask=aware and self.ref_mask == "same")
        where = reference_kind(trainer)
        if done.wemask.active and where != "none":
            state = "masked like the policy" if (aware and self.ref_mask == "same") else "unmasked"
            how = f"--ref-mask {self.ref_mask}" if self.policy == "choose" else f"reference mask {self.ref_mask}"
            say(f"{self.stage} reference ({where}): {state} ({how}{', free mode' if done.wemask.mode == 'free' else ''})")
        return done
