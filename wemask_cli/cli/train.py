"""`wemask sft`, `wemask dpo`, `wemask grpo`: shared training flags, each stage's own, TRL's passing through."""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from typer.core import TyperCommand

from ..train.trl_vocabulary import alias_flags, trl_spellings
from .options import LayersOpt, MeLayerOpt, SelectOpt, StrengthOpt, TokensOpt

STAGE_CLASSES = {"sft": "SFTStage", "dpo": "DPOStage", "grpo": "GRPOStage"}
TRAIN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
TRAIN_EPILOG = (
    "Every other option is TRL's and passes through to its config class (SFTConfig, DPOConfig, GRPOConfig), "
    "in either spelling (--learning-rate or --learning_rate): e.g. --learning-rate 2e-5 --per-device-train-batch-size 8 "
    "--gradient-accumulation-steps 4 --num-train-epochs 1 --max-steps 100 --max-length 1024 --packing --bf16 "
    "--gradient-checkpointing --logging-steps 10 --save-steps 500 --report-to wandb --seed 0. "
    "--help-trl lists them all. Precedence: defaults < --config recipe.yaml < flags. Without CUDA the defaults are "
    "use_cpu, no bf16, no gradient checkpointing; under accelerate launch the config's mixed_precision sets bf16/fp16. Multi-GPU: accelerate launch -m wemask_cli sft ... or "
    "torchrun --nproc_per_node N -m wemask_cli sft ..."
)
OutputDirOpt = Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Where checkpoints and the trained model go.")]
RecipeOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Recipe YAML: wemask and TRL keys (flags override it).")]
TrainModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", *alias_flags("model"), help="Hub id, local model directory, .gguf file, or omit for the embedded SmolLM2-135M-Instruct."),
]
DatasetOpt = Annotated[
    Optional[str], typer.Option("--dataset", *alias_flags("dataset"), help="Local .jsonl/.json/.parquet/.csv file or a hub dataset name.")
]
DatasetSplitOpt = Annotated[
    Optional[str], typer.Option("--dataset-split", *alias_flags("dataset_split"), help="Split to train on (default train; 'train[:1000]' slices).")
]
DatasetConfigOpt = Annotated[Optional[str], typer.Option(help="Hub dataset configuration name (e.g. main for gsm8k).")]
DatasetColumnsOpt = Annotated[
    Optional[str], typer.Option(help="Rename columns, ours=theirs: prompt=question,completion=answer.")
]
EvalDatasetOpt = Annotated[Optional[str], typer.Option(help="Evaluation data (same formats); eval loss goes to metrics.json.")]
EvalSplitOpt = Annotated[
    Optional[str],
    typer.Option("--eval-split", *alias_flags("eval_split"), help="Split of --eval-dataset (default train); without --eval-dataset, that split of --dataset, as TRL's scripts do."),
]
TrainMaskRateOpt = Annotated[
    Optional[str], typer.Option("--mask-rate", "-r", help="Share r in [0, 1] of dims masked. Default: the wemask_config.json the model carries (its mode kept unless --mode), else none (plain TRL).")
]
ModeOpt = Annotated[
    Optional[str], typer.Option(help="aware: mask in every training forward and at inference | free: train plain, mask at inference.")
]
UsePeftOpt = Annotated[Optional[bool], typer.Option("--use-peft/--no-use-peft", help="Train LoRA adapters instead of all weights.")]
LoraROpt = Annotated[Optional[int], typer.Option(help="LoRA rank (default 16).")]
LoraAlphaOpt = Annotated[Optional[int], typer.Option(help="LoRA alpha (default 32).")]
LoraDropoutOpt = Annotated[Optional[float], typer.Option(help="LoRA dropout (default 0.05).")]
LoraTargetsOpt = Annotated[
    Optional[str], typer.Option(help="Comma list of module names, or all-linear (default: PEFT's per-model choice).")
]
Load4bitOpt = Annotated[Optional[bool], typer.Option("--load-in-4bit", help="Load weights 4-bit NF4 (bitsandbytes: CUDA, or CPU from 0.49; needs --use-peft).")]
Load8bitOpt = Annotated[Optional[bool], typer.Option("--load-in-8bit", help="Load weights 8-bit (bitsandbytes: CUDA, or CPU from 0.49; needs --use-peft).")]
TrainDtypeOpt = Annotated[
    Optional[str], typer.Option("--dtype", *alias_flags("dtype"), help="auto | float32 | bfloat16 | float16 (auto: float32 on CPU).")
]
TRL_PANEL = "TRL ModelConfig options"
TRL_MODEL_OPTIONS = {  # TRL ModelConfig's fields that wemask passes to PEFT, from_pretrained and bitsandbytes
    "lora_modules_to_save": Annotated[Optional[str], typer.Option(help="Comma (or space) list of modules trained in full and saved with the adapter.", rich_help_panel=TRL_PANEL)],
    "lora_task_type": Annotated[Optional[str], typer.Option(help="PEFT task type (default CAUSAL_LM).", rich_help_panel=TRL_PANEL)],
    "use_dora": Annotated[Optional[bool], typer.Option("--use-dora/--no-use-dora", help="DoRA: weight-decomposed LoRA.", rich_help_panel=TRL_PANEL)],
    "use_rslora": Annotated[Optional[bool], typer.Option("--use-rslora/--no-use-rslora", help="Rank-stabilised LoRA scaling (alpha/sqrt(r)).", rich_help_panel=TRL_PANEL)],
    "model_revision": Annotated[Optional[str], typer.Option(help="Hub revision (branch, tag or commit) of --model.", rich_help_panel=TRL_PANEL)],
    "attn_implementation": Annotated[Optional[str], typer.Option(help="eager | sdpa | flash_attention_2 | ... (default: transformers' choice).", rich_help_panel=TRL_PANEL)],
    "trust_remote_code": Annotated[Optional[bool], typer.Option("--trust-remote-code/--no-trust-remote-code", help="Run the model repository's own Python code (off by default; a warning when on).", rich_help_panel=TRL_PANEL)],
    "bnb_4bit_quant_type": Annotated[Optional[str], typer.Option(help="nf4 (default) | fp4, with --load-in-4bit.", rich_help_panel=TRL_PANEL)],
    "use_bnb_nested_quant": Annotated[Optional[bool], typer.Option("--use-bnb-nested-quant/--no-use-bnb-nested-quant", help="Double quantization of the 4-bit scales (default on).", rich_help_panel=TRL_PANEL)],
}
OverwriteOpt = Annotated[
    Optional[bool],
    typer.Option("--overwrite", help="Replace an earlier wemask run in --output-dir (only the files wemask wrote; refused while others are there)."),
]
ResumeOpt = Annotated[Optional[bool], typer.Option("--resume", help="Continue from the newest complete checkpoint in --output-dir.")]
HelpTrlOpt = Annotated[bool, typer.Option("--help-trl", help="List every TRL option this command passes through, then exit.")]


TRAIN_OPTIONS = {
    "model": TrainModelOpt,
    "output_dir": OutputDirOpt,
    "config": RecipeOpt,
    "dataset": DatasetOpt,
    "dataset_split": DatasetSplitOpt,
    "dataset_config": DatasetConfigOpt,
    "dataset_columns": DatasetColumnsOpt,
    "eval_dataset": EvalDatasetOpt,
    "eval_split": EvalSplitOpt,
    "mask_rate": TrainMaskRateOpt,
    "mode": ModeOpt,
    "me_layer": MeLayerOpt,
    "select": SelectOpt,
    "layers": LayersOpt,
    "strength": StrengthOpt,
    "tokens": TokensOpt,
    "use_peft": UsePeftOpt,
    "lora_r": LoraROpt,
    "lora_alpha": LoraAlphaOpt,
    "lora_dropout": LoraDropoutOpt,
    "lora_target_modules": LoraTargetsOpt,
    "load_in_4bit": Load4bitOpt,
    "load_in_8bit": Load8bitOpt,
    "dtype": TrainDtypeOpt,
    "overwrite": OverwriteOpt,
    "resume": ResumeOpt,
    **TRL_MODEL_OPTIONS,
}


def intervention_flags() -> dict:
    """A typer option per flag the registered interventions declare (GatedNorm, PreAffine, gated attention, ...):
    adding an intervention adds its flags here without touching this file. Torch-free."""
    from ..interventions import flag_specs

    flags = {}
    for spec in flag_specs():
        default = "" if spec.default is None or spec.type is bool else f" (default {spec.default})"
        choices = f" [{' | '.join(spec.choices)}]" if spec.choices else ""
        names = (f"{spec.name}/--no-{spec.name[2:]}",) if spec.type is bool else (spec.name,)
        option = typer.Option(*names, help=f"{spec.help}{choices}{default}.", rich_help_panel="Interventions (sink remedies, arXiv:2601.22966)")
        flags[spec.dest] = Annotated[Optional[spec.type], option]
    return flags


def training_command(app: typer.Typer, stage_name: str, doc: str, **stage_flags) -> None:
    """Register `wemask STAGE`: the shared training flags, the stage's own flags, and TRL's passing through."""

    def command(ctx: typer.Context, help_trl: bool = False, **options) -> None:
        import importlib

        from ..masking import MaskRequest

        mask_flags = ("mask_rate", "me_layer", "select", "layers", "strength", "tokens")
        MaskRequest.parse(*(options[name] for name in mask_flags))  # a typo answers before torch is imported
        from ..train.trl_flags import check_extra_args

        check_extra_args(ctx.args, stage_name, [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)])
        from ..train.options import TrainOptions
        from ..train.resolve import trl_help
        from ..train.run import run

        stage = getattr(importlib.import_module(f"wemask_cli.train.{stage_name}"), STAGE_CLASSES[stage_name])()
        if help_trl:
            print(trl_help(stage))
            return
        stage_options = {name: options.pop(name) for name in stage_flags}
        remedy_options = {name: options.pop(name) for name in remedy_flags}
        result = run(stage, TrainOptions(**options, stage_options=stage_options, intervention_options=remedy_options), ctx.args)
        if result.interrupted:
            raise typer.Exit(130)

    keyword = inspect.Parameter.KEYWORD_ONLY
    remedy_flags = intervention_flags()
    flags = {**TRAIN_OPTIONS, **stage_flags, **remedy_flags}
    command.__signature__ = inspect.Signature(
        [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
        + [inspect.Parameter(name, keyword, default=None, annotation=flag) for name, flag in flags.items()]
        + [inspect.Parameter("help_trl", keyword, default=False, annotation=HelpTrlOpt)]
    )
    command.__doc__ = doc
    app.command(stage_name, cls=TrlSpellingCommand, context_settings=TRAIN_CONTEXT, epilog=TRAIN_EPILOG)(command)


class TrlSpellingCommand(TyperCommand):
    """A training command that also takes TRL's spellings of wemask's own options (see train/trl_vocabulary.py)."""

    def parse_args(self, ctx, args):
        own = {name for param in self.params for name in (*param.opts, *param.secondary_opts)}
        return super().parse_args(ctx, trl_spellings(args, own))


RefMaskOpt = Annotated[
    Optional[str],
    typer.Option(
        "--ref-mask",
        help="same (default in aware mode): the reference model computes with the policy's mask, so step-0 rewards are 0 | "
        "none: unmasked reference. free mode is plain DPO (both unmasked).",
    ),
]


RewardOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--reward",
        help="Reward NAME[:WEIGHT], repeatable (default math): math | format | path/to/file.py:function | "
        "module:function, called as f(completions, **kwargs) -> list[float] with dataset columns as keywords.",
    ),
]
ChatTemplateOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--chat-template/--no-chat-template",
        help="Put plain-text prompts in a user message (default: for GSM8K-layout 'question' data when the tokenizer has a chat template).",
    ),
]


def register(app: typer.Typer) -> None:
    training_command(
        app,
        "sft",
        """Supervised fine-tuning with TRL's SFTTrainer and WeMask (data: messages | prompt/completion | text).

        Every checkpoint and the output directory carry wemask_config.json (mode and dims) and wemask_run.json (resolved settings, versions, seed); the output also gets metrics.json. `wemask infer --model OUTPUT_DIR` applies the recorded mask. Ctrl-C saves a checkpoint; --resume continues from it.
        """,
    )
    training_command(
        app,
        "dpo",
        """Preference tuning with TRL's DPOTrainer and WeMask (data: prompt/chosen/rejected | chosen/rejected with an implicit prompt, the HH-RLHF layout).

        The reference model follows --ref-mask (see its help); full fine-tuning loads it from the model's path, LoRA uses the adapter-disabled policy. Outputs as in sft: wemask_config.json, wemask_run.json, metrics.json (with the first step's rewards). TRL's DPO options pass through: --beta, --loss-type, --max-length, --precompute-ref-log-probs, ...
        """,
        ref_mask=RefMaskOpt,
    )
    training_command(
        app,
        "grpo",
        """GRPO with TRL's GRPOTrainer and WeMask (data: prompt [+ answer] | GSM8K question/answer as is).

        aware: rollouts are generated with the mask and the loss passes use it on the same first real token;
        free: plain GRPO, the mask recorded for inference. --use-vllm: TRL's in-process vLLM engine generates,
        with the same mask in aware mode (--vllm-mode server: GPUs only). Rename columns with --dataset-columns
        prompt=X,answer=Y. TRL's GRPO options pass through:
        --num-generations, --max-completion-length, --temperature, --beta, --use-vllm, ...
        """,
        reward=RewardOpt,
        chat_template=ChatTemplateOpt,
    )
