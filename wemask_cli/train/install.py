"""Interventions on the models a trainer runs: the policy (the module TRL trains, PeftModel included) and, where a
stage has one, a separate reference model (reference.py); what is saved with every checkpoint; LoRA settings; the WeMask config
the flags ask for. Installed and saved through `wemask_cli.interventions` (install_all, save_configs).

WeMask, aware mode: its hooks stay for training, dims chosen once from the starting weights; free mode: the dims
are chosen the same way and the hooks removed at once (the config is only recorded, for inference). The remedies
(GatedNorm, PreAffine, gated attention) start as the identity, or with the weights of the run being resumed or
continued; their parameters train even when LoRA freezes the base. Every hook and module is owned:
`StageInstallation.remove()` removes exactly what was installed, on the policy and the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError


@dataclass
class StageInstallation:
    """What a stage installed: the WeMask config used (dims recorded, also in free mode), the remedies on the policy
    (their weights are saved with every checkpoint), and every Installation to remove."""

    wemask: WeMaskConfig
    remedies: object = None  # interventions.Installation on the policy, or None
    installed: list = field(default_factory=list)  # every interventions.Installation, policy's and reference's

    def save(self, directory, wemask: WeMaskConfig | None = None) -> None:
        """interventions.json (+ interventions.safetensors with the remedies' current weights) and
        wemask_config.json, each written atomically; `wemask`: the config to record (default: the one installed)."""
        from wemask_cli.interventions import WeMask, save_configs

        configs = [WeMask(wemask or self.wemask)] + (self.remedies.configs if self.remedies else [])
        save_configs(directory, configs, self.remedies.state_dict() if self.remedies else None)

    def remove(self) -> None:
        """Remove everything installed, on every model (idempotent)."""
        for installation in reversed(self.installed):
            installation.remove()
        self.installed = []


def is_peft(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def zero3_gather(model):
    """Under DeepSpeed ZeRO-3 the norm weights are partitioned: gather them (a collective) to choose dims."""
    from wemask_cli.method.arch import resolve_layers
    from wemask_cli.train.distributed import gathered

    return gathered([parts.mask_norm.weight for parts in resolve_layers(model) if parts.mask_norm is not None])


def install_mask(model, config: WeMaskConfig, *, active: Callable[[], bool] | None = None):
    """WeMask on `model` (weights gathered under ZeRO-3); returns its Installation (`.wemask` has the dims)."""
    from wemask_cli.interventions import install_all

    with zero3_gather(model):
        return install_all(model, [config], active=active)


def install_on_policy(trainer, ctx, *, mask_active=None, remedies_active=None) -> StageInstallation:
    """WeMask and the remedies on `trainer.model`. `mask_active` / `remedies_active`: predicates that let the
    hooks step aside (DPO's unmasked reference pass; a PEFT reference pass, which must not see trained remedies)."""
    from wemask_cli.interventions import install_all

    config, model = ctx.wemask, trainer.model
    done = StageInstallation(config.with_updates(dims=None))
    if config.active:  # r = 0: nothing to install, and no need to gather sharded weights
        mask = install_mask(model, config, active=mask_active)
        done.wemask = mask.wemask
        if config.mode == "free":
            mask.remove()
        else:
            done.installed.append(mask)
    if ctx.remedies:
        done.remedies = install_all(model, ctx.remedies, weights=ctx.remedy_weights or None, active=remedies_active)
        done.installed.append(done.remedies)
    return done


def free_mode_dims(model, config: WeMaskConfig) -> WeMaskConfig:
    """For free mode: the dims `wemask infer` would pick on the weights being saved (SPEC: a function of the
    weights at the moment the mask is applied). Falls back to the recorded dims when weights are sharded or the
    selection needs a forward pass (select=activation)."""
    from wemask_cli.method.arch import base_model, resolve_layers
    from wemask_cli.method.wemask_hook import apply_wemask

    if not config.active or config.select == "activation":
        return config
    weight = next(part.mask_norm.weight for part in resolve_layers(model) if part.mask_norm is not None)
    if weight.dim() != 1 or weight.numel() != getattr(base_model(model).config, "hidden_size", None):
        return config  # sharded (ZeRO-3, FSDP): keep the dims chosen at the start
    handle = apply_wemask(model, config.with_updates(dims=None))
    handle.remove()
    return handle.config


def requested_wemask(resolved, loaded) -> WeMaskConfig:
    """The WeMaskConfig the flags ask for, mode recorded; dims chosen at install.

    Without --mask-rate: the model's saved config, keeping its saved mode unless --mode is given, else r=0.
    """
    from transformers.integrations import is_deepspeed_zero3_enabled

    from wemask_cli.method.arch import decoder_layers

    opts, mask = resolved.opts, resolved.mask
    if mask.effective_me_layer(loaded.saved_wemask) == "auto" and is_deepspeed_zero3_enabled():
        raise WeMaskError(
            "--me-layer auto (the default with --mask-rate) cannot locate on ZeRO-3-partitioned weights: "
            "run `wemask locate --model M` once and pass --me-layer N"
        )
    with resolved.args.main_process_first(desc="locating the ME layer"):
        mode_given = mask.rates is not None or resolved.provenance["wemask"]["mode"] != "default"
        (config,) = mask.configs(loaded, mode=opts["mode"] if mode_given else None)
    config = config or WeMaskConfig(mode=opts["mode"])
    if config.active:  # a layer outside the model fails now, before the data is tokenized
        config.layer_indices(len(decoder_layers(loaded.model)))
    return config


def lora_config(opts: dict, model):
    """PEFT's LoraConfig for --use-peft (else None), built by TRL's `get_peft_config` from a `trl.ModelConfig`;
    every named target must be a module of `model` (PEFT's own error for a miss is a traceback)."""
    if not opts["use_peft"]:
        return None
    from trl import ModelConfig, get_peft_config

    targets = module_names(opts["lora_target_modules"]) or default_lora_targets(model)
    if isinstance(targets, list):
        check_lora_targets(targets, model)
    to_save = module_names(opts["lora_modules_to_save"])
    if to_save:
        check_lora_targets(to_save, model, "--lora-modules-to-save")
    settings = ModelConfig(
        use_peft=True, lora_r=int(opts["lora_r"]), lora_alpha=int(opts["lora_alpha"]),
        lora_dropout=float(opts["lora_dropout"]), lora_target_modules=targets or None, lora_modules_to_save=to_save or None,
        lora_task_type=opts["lora_task_type"], use_dora=bool(opts["use_dora"]), use_rslora=bool(opts["use_rslora"]),
    )
    return get_peft_config(settings)


def default_lora_targets(model) -> list[str] | None:
    """Without --lora-target-modules: PEFT's per-model choice (None: PEFT applies it; named for MoE models); for a
    model type it has none for (most MoE families, OLMo-2, Cohere 2, Granite in PEFT 0.21), q_proj and v_proj as
    PEFT picks for Llama-like decoders, or every linear layer of the attention when it has no such pair (DeepSeek's
    MLA). Not 'all-linear': PEFT 0.21 then wraps the fused expert tensors too, which refuses LoRA dropout."""
    import torch
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    from wemask_cli.method.arch import model_type, resolve_layers

    parts = resolve_layers(model)
    known = PEFT_DEFAULTS.get(model_type(model))
    if known and all(part.experts is None for part in parts):
        return None
    if known:  # PEFT 0.21 finds no target itself in an MoE model (Mixtral) although it names them
        return list(known)
    attention = parts[0].attention
    names = sorted({name.rsplit(".", 1)[-1] for name, m in attention.named_modules() if isinstance(m, torch.nn.Linear)})
    return ["q_proj", "v_proj"] if {"q_proj", "v_proj"} <= set(names) else names


def module_names(value) -> list[str] | str | None:
    """A comma list (the CLI's form) or a YAML list of module names; 'all-linear' stays as it is."""
    if isinstance(value, str):
        return value if value == "all-linear" else [name.strip() for name in value.split(",") if name.strip()]
    return list(value) if isinstance(value, (list, tuple)) else None


def check_lora_targets(targets: list, model, flag: str = "--lora-target-modules") -> None:
    """PEFT matches a name or a dotted suffix of one; name the module names that would work."""
    names = [name for name, _ in model.named_modules()]
    unknown = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if unknown:
        import torch

        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise WeMaskError(
            f"{flag}: {', '.join(map(str, unknown))} is not a module of this model; "
            f"use names like {','.join(linear[:8])}" + (", or all-linear" if flag == "--lora-target-modules" else "")
        )
