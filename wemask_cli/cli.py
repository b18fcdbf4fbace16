"""The `wemask` command line: parses flags, calls one function per command, turns user errors into one line.

Every command's work lives outside this module; here are only flags, help and error handling.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import WeMaskError

app = typer.Typer(
    help="WeMask: mask the massive-activation token's attention input, at inference or while fine-tuning with TRL.\n\n"
    "Layer indices are 0-based everywhere (layer l is model.model.layers\\[l]).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

@app.callback()
def wemask() -> None:
    """WeMask for LLM inference and TRL fine-tuning."""


ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help="Hub id, local model directory, .gguf file, or omit for the embedded SmolLM2-135M-Instruct."),
]
DtypeOpt = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: checkpoint dtype on GPU, float32 on CPU).")]
MaskRateOpt = Annotated[
    Optional[str],
    typer.Option("--mask-rate", "-r", help="Share r in [0, 1] of dims to mask; a comma list (0,0.3,1.0) runs each rate."),
]
MeLayerOpt = Annotated[Optional[str], typer.Option("--me-layer", help="0-based ME layer, or 'auto' to locate it (cached per model).")]
SelectOpt = Annotated[Optional[str], typer.Option(help="weight (the method: top |RMSNorm weight|) | activation | random.")]
LayersOpt = Annotated[Optional[str], typer.Option(help="from-me (default) | me-only | all | a:b (0-based, b exclusive).")]
StrengthOpt = Annotated[Optional[float], typer.Option(help="Masking strength in [0, 1]: dims are multiplied by 1 - strength.")]
ReplaceOpt = Annotated[bool, typer.Option("--overwrite", help="Replace output files that already exist.")]


@app.command()
def infer(
    model: ModelOpt = None,
    prompt: Annotated[Optional[list[str]], typer.Option("--prompt", "-p", help="A prompt (repeatable).")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="jsonl with 'prompt' or 'messages', or text lines.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write jsonl: input, completion, WeMask settings.")] = None,
    chat_template: Annotated[bool, typer.Option(help="Apply the model's chat template when it has one.")] = True,
    max_new_tokens: int = 64,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default); > 0 samples.")] = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    dtype: DtypeOpt = "auto",
    mask_rate: MaskRateOpt = None,
    me_layer: MeLayerOpt = None,
    select: SelectOpt = None,
    layers: LayersOpt = None,
    strength: StrengthOpt = None,
    overwrite: ReplaceOpt = False,
):
    """Generate with and without WeMask; several --mask-rate values are shown side by side (one model load).

    Without --mask-rate, the wemask_config.json saved in the model directory is applied, else no mask.
    """
    from .infer import GenerationSettings, read_prompts, run_infer, write_jsonl
    from .masking import MaskFlags, configs_from_flags
    from .models import load_model
    from .render import check_outputs, completions_table, console, err_console

    check_outputs([output], overwrite)
    prompts = read_prompts(prompt, input)
    flags = MaskFlags(mask_rate, me_layer, select, layers, strength)
    settings = GenerationSettings(max_new_tokens, temperature, top_p, seed, batch_size, chat_template)
    with err_console.status("Loading model..."):
        loaded = load_model(model, dtype=dtype)
    configs = configs_from_flags(flags, loaded)
    with err_console.status(f"Generating {len(prompts)} prompt(s) x {len(configs)} setting(s)..."):
        records = run_infer(loaded, prompts, configs, settings)
    console.print(completions_table(records))
    if output:
        write_jsonl(records, output)
        err_console.print(f"Wrote {len(records)} records to {output}")


@app.command()
def locate(
    model: ModelOpt = None,
    prompts: Annotated[Optional[Path], typer.Option(help="jsonl with 'text' or 'messages', or text lines (default: data/locate_prompts.jsonl).")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Local .jsonl/.json/.parquet/.csv file or hub dataset name instead of --prompts.")] = None,
    text_field: Annotated[str, typer.Option(help="Column of --dataset holding the text (or messages).")] = "text",
    num_prompts: Annotated[Optional[int], typer.Option(help="Use the first N prompts (default: all of --prompts, 32 of --dataset).")] = None,
    max_length: Annotated[int, typer.Option(help="Truncate prompts to this many tokens.")] = 256,
    batch_size: Annotated[int, typer.Option(help="Prompts per forward pass (memory does not grow with --num-prompts).")] = 8,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the full report (stable keys, see README).")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG of the per-layer curves.")] = None,
    mask_rate: Annotated[Optional[list[str]], typer.Option("--mask-rate", "-r", metavar="R", help="Also measure with WeMask at rate R from the ME layer (repeatable or comma list).")] = None,
    dtype: DtypeOpt = "auto",
    overwrite: ReplaceOpt = False,
):
    """Find the ME layer (0-based): where the first token's norm jumps by an order of magnitude, written by the FFN.

    Prints per-layer statistics (SPEC section 2 metrics, attention sink, residual sinks) and a verdict.
    """
    from rich.progress import Progress

    from .locate import load_prompts, run_locate
    from .masking import parse_mask_rates
    from .models import load_model
    from .render import check_outputs, console, err_console, locate_plot, locate_table, mask_rates_table, write_json

    rates = parse_mask_rates(",".join(mask_rate)) if mask_rate else []
    if plot is not None and plot.suffix.lower() != ".png":
        raise WeMaskError(f"--plot {plot}: the plot is a PNG, give a file name ending in .png")
    check_outputs([json_out, plot], overwrite)
    texts = load_prompts(prompts, dataset, text_field, num_prompts)
    with err_console.status("Loading model..."):
        loaded = load_model(model, dtype=dtype)
    with Progress(console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
        task = progress.add_task("Measuring layers", total=len(texts) * (1 + len(rates)))
        report = run_locate(
            loaded, texts, max_length=max_length, batch_size=batch_size, mask_rates=rates,
            progress=lambda done: progress.advance(task, done),
        )  # fmt: skip
    console.print(locate_table(report, console.width))
    if report["mask_rates"]:
        console.print(mask_rates_table(report))
    elif rates:
        err_console.print("No ME layer found: --mask-rate was not measured.")
    console.print(report["verdict"])
    if json_out:
        err_console.print(f"Wrote {write_json(report, json_out)}")
    if plot:
        err_console.print(f"Wrote {locate_plot(report, plot)}")


# --- training commands: sft, dpo and grpo share these flags through `training_command` ---
TRAIN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
TRAIN_EPILOG = (
    "Every other option is TRL's and passes through to its config class (SFTConfig, DPOConfig, GRPOConfig), "
    "in either spelling (--learning-rate or --learning_rate): e.g. --learning-rate 2e-5 --per-device-train-batch-size 8 "
    "--gradient-accumulation-steps 4 --num-train-epochs 1 --max-steps 100 --max-length 1024 --packing --bf16 "
    "--gradient-checkpointing --logging-steps 10 --save-steps 500 --report-to wandb --seed 0. "
    "--help-trl lists them all. Precedence: defaults < --config recipe.yaml < flags. Without CUDA the defaults are "
    "use_cpu, no bf16, no gradient checkpointing. Multi-GPU: accelerate launch -m wemask_cli sft ... or "
    "torchrun --nproc_per_node N -m wemask_cli sft ..."
)
OutputDirOpt = Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Where checkpoints and the trained model go.")]
RecipeOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Recipe YAML: wemask and TRL keys (flags override it).")]
DatasetOpt = Annotated[Optional[str], typer.Option(help="Local .jsonl/.json/.parquet/.csv file or a hub dataset name.")]
DatasetSplitOpt = Annotated[Optional[str], typer.Option(help="Split to train on (default train; 'train[:1000]' slices).")]
DatasetConfigOpt = Annotated[Optional[str], typer.Option(help="Hub dataset configuration name (e.g. main for gsm8k).")]
DatasetColumnsOpt = Annotated[
    Optional[str], typer.Option(help="Rename columns, ours=theirs: prompt=question,completion=answer.")
]
EvalDatasetOpt = Annotated[Optional[str], typer.Option(help="Evaluation data (same formats); eval loss goes to metrics.json.")]
EvalSplitOpt = Annotated[Optional[str], typer.Option(help="Split of --eval-dataset (default train).")]
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
Load4bitOpt = Annotated[Optional[bool], typer.Option("--load-in-4bit", help="Load weights 4-bit (bitsandbytes, CUDA only; needs --use-peft).")]
Load8bitOpt = Annotated[Optional[bool], typer.Option("--load-in-8bit", help="Load weights 8-bit (bitsandbytes, CUDA only; needs --use-peft).")]
TrainDtypeOpt = Annotated[Optional[str], typer.Option(help="auto | float32 | bfloat16 | float16 (auto: float32 on CPU).")]
OverwriteOpt = Annotated[Optional[bool], typer.Option("--overwrite", help="Delete an existing run in --output-dir first.")]
ResumeOpt = Annotated[Optional[bool], typer.Option("--resume", help="Continue from the last checkpoint in --output-dir.")]
HelpTrlOpt = Annotated[bool, typer.Option("--help-trl", help="List every TRL option this command passes through, then exit.")]


TRAIN_OPTIONS = {
    "model": ModelOpt,
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
}


def training_command(stage_name: str, doc: str, **stage_flags) -> None:
    """Register `wemask STAGE`: the shared training flags, the stage's own flags, and TRL's passing through."""

    def command(ctx: typer.Context, help_trl: bool = False, **options) -> None:
        import importlib

        from .train.common import TrainOptions, run, trl_help

        stage = importlib.import_module(f".train.{stage_name}", __package__).stage()
        if help_trl:
            print(trl_help(stage))
            return
        stage_options = {name: options.pop(name) for name in stage_flags}
        result = run(stage, TrainOptions(**options, stage_options=stage_options), ctx.args)
        if result.interrupted:
            raise typer.Exit(130)

    keyword = inspect.Parameter.KEYWORD_ONLY
    flags = {**TRAIN_OPTIONS, **stage_flags}
    command.__signature__ = inspect.Signature(
        [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
        + [inspect.Parameter(name, keyword, default=None, annotation=flag) for name, flag in flags.items()]
        + [inspect.Parameter("help_trl", keyword, default=False, annotation=HelpTrlOpt)]
    )
    command.__doc__ = doc
    app.command(stage_name, context_settings=TRAIN_CONTEXT, epilog=TRAIN_EPILOG)(command)


training_command(
    "sft",
    """Supervised fine-tuning with TRL's SFTTrainer and WeMask (data: messages | prompt/completion | text).

    Every checkpoint and the output directory carry wemask_config.json (mode and dims) and wemask_run.json (resolved settings, versions, seed); the output also gets metrics.json. `wemask infer --model OUTPUT_DIR` applies the recorded mask. Ctrl-C saves a checkpoint; --resume continues from it.
    """,
)

RefMaskOpt = Annotated[
    Optional[str],
    typer.Option(
        "--ref-mask",
        help="same (default in aware mode): the reference model computes with the policy's mask, so step-0 rewards are 0 | "
        "none: unmasked reference. free mode is plain DPO (both unmasked).",
    ),
]


training_command(
    "dpo",
    """Preference tuning with TRL's DPOTrainer and WeMask (data: prompt/chosen/rejected | chosen/rejected with an implicit prompt, the HH-RLHF layout).

    The reference model follows --ref-mask (see its help); full fine-tuning loads it from the model's path, LoRA uses the adapter-disabled policy. Outputs as in sft: wemask_config.json, wemask_run.json, metrics.json (with the first step's rewards). TRL's DPO options pass through: --beta, --loss-type, --max-length, --precompute-ref-log-probs, ...
    """,
    ref_mask=RefMaskOpt,
)

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


training_command(
    "grpo",
    """GRPO with TRL's GRPOTrainer and WeMask (data: prompt [+ answer] | GSM8K question/answer as is).

    aware: rollouts are generated with the mask and the loss passes use it on the same first real token;
    free: plain GRPO, the mask recorded for inference. --use-vllm works in free mode only (vLLM runs no
    PyTorch hooks). Rename columns with --dataset-columns prompt=X,answer=Y. TRL's GRPO options pass through:
    --num-generations, --max-completion-length, --temperature, --beta, --use-vllm, ...
    """,
    reward=RewardOpt,
    chat_template=ChatTemplateOpt,
)


@app.command("eval")
def eval_(
    model: ModelOpt = None,
    task: Annotated[Optional[str], typer.Option("--task", "-t", help="perplexity | choice | math | refusal.")] = None,
    data: Annotated[
        Optional[str], typer.Option(help="Local .jsonl/.json/.csv/.parquet/.txt file or hub dataset (default: the bundled data/eval set).")
    ] = None,
    split: Annotated[Optional[str], typer.Option(help="Hub split (default test); local files: train or a slice like 'train[:100]'.")] = None,
    data_config: Annotated[Optional[str], typer.Option(help="Hub dataset configuration (e.g. main for gsm8k, all for cais/mmlu).")] = None,
    mask_rates: Annotated[
        Optional[str],
        typer.Option("--mask-rates", "--mask-rate", "-r", help="Comma list of rates in [0, 1]; default: the model directory's saved wemask_config.json, else no mask."),
    ] = None,
    me_layer: MeLayerOpt = None,
    select: SelectOpt = None,
    layers: LayersOpt = None,
    strength: StrengthOpt = None,
    seeds: Annotated[int, typer.Option(help="Seeds per rate (math/refusal: sampled at --temperature; perplexity/choice are deterministic: 1).")] = 1,
    limit: Annotated[Optional[int], typer.Option(help="Use the first N examples (perplexity: N windows).")] = None,
    batch_size: Annotated[int, typer.Option(help="Sequences per forward / generate call.")] = 8,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="Generation length (default math 256, refusal 64).")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default 0 = greedy; 0.7 when --seeds > 1).")] = None,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling when sampling.")] = 1.0,
    window: Annotated[int, typer.Option(help="perplexity: tokens per window (non-overlapping).")] = 256,
    text_field: Annotated[Optional[str], typer.Option(help="perplexity: text column (default text).")] = None,
    question_field: Annotated[
        Optional[str], typer.Option("--question-field", "--prompt-field", help="Question / prompt column (default question, problem, goal, ctx, prompt...).")
    ] = None,
    choices_field: Annotated[
        Optional[str], typer.Option(help="choice: options column (a list or ARC's text/label dict), or a comma list of columns like sol1,sol2.")
    ] = None,
    answer_field: Annotated[
        Optional[str], typer.Option(help="Answer column (choice: index, letter, label or option text; math: GSM8K '#### N' or a bare answer).")
    ] = None,
    prompt_template: Annotated[
        Optional[str], typer.Option(help="choice/math prompt with a {question} placeholder (choice default: 'Question: {question}\\nAnswer:').")
    ] = None,
    chat_template: Annotated[
        Optional[bool], typer.Option("--chat-template/--no-chat-template", help="Wrap prompts in the chat template (default: on for math and refusal, off for choice).")
    ] = None,
    lm_eval_tasks: Annotated[
        Optional[str], typer.Option(help="Comma list of lm-evaluation-harness tasks, run through the hooked model (needs `pip install lm-eval`).")
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output directory (default runs/eval/TASK-TIME).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Write into a non-empty --output directory.")] = False,
    dtype: DtypeOpt = "auto",
):
    """Evaluate one model at several mask rates in one process: table, metrics.json, results.csv, examples.jsonl, curve.png.

    The model is loaded once; the WeMask hook is applied for each rate and removed after it. Tasks: perplexity (exp mean token NLL over --window-token windows), choice (log-likelihood of each option: accuracy, and accuracy_norm per character), math (generate, then the GRPO math reward's extract_answer/answers_match: accuracy), refusal (share of completions whose first 300 characters match a refusal phrase: I'm sorry, I apologize, I can't/cannot/won't help|assist|provide..., as an AI, against my guidelines...; the list is wemask_cli.evaluate.REFUSAL_PATTERNS).

    Spread: the standard error over examples, or with --seeds N (math, refusal) the std across sampled seeds. Compare runs with `wemask report DIR...`.
    """
    from .evaluate import EvalSettings, eval_command
    from .masking import MaskFlags

    flags = MaskFlags(mask_rates, me_layer, select, layers, strength)
    settings = EvalSettings(
        task=task, data=data, split=split, data_config=data_config, text_field=text_field, question_field=question_field,
        choices_field=choices_field, answer_field=answer_field, window=window, limit=limit, batch_size=batch_size,
        max_new_tokens=max_new_tokens, seeds=seeds, temperature=temperature, top_p=top_p, prompt_template=prompt_template,
        chat_template=chat_template,
    )
    eval_command(model, settings, flags, output, overwrite, dtype, lm_eval_tasks)


@app.command()
def report(
    dirs: Annotated[list[Path], typer.Argument(help="Run directories with metrics.json (their sub-directories are searched too).")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the merged rows as JSON.")] = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Write the merged rows as CSV.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="PNG path (default report.png next to the run directories).")] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Skip the PNG.")] = False,
    overwrite: ReplaceOpt = False,
):
    """Merge the metrics.json of any number of runs (eval, sft, dpo, grpo) into one table and one plot by mode and mask rate."""
    from .report import report_command

    report_command(dirs, json_out, csv_out, plot, no_plot, overwrite)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    import logging
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # its CPU-kernel notice is noise for users
    warnings.filterwarnings("ignore", category=FutureWarning)  # libraries' deprecation notices, not the user's doing
    try:
        code = app(prog_name="wemask", standalone_mode=False)  # usage errors come back here, not as a boxed usage text
    except WeMaskError as err:
        print(f"wemask: error: {err}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except Exception as err:
        if not hasattr(err, "format_message"):  # not a click usage error (Typer 0.29 vendors click as typer._click)
            raise
        message = " ".join(err.format_message().split())
        if message:  # empty for a bare `wemask`, whose help is already printed
            ctx = getattr(err, "ctx", None)  # None for a missing option value: then the command is argv's first word
            command = ctx.command_path if ctx else " ".join(["wemask", *[a for a in sys.argv[1:2] if not a.startswith("-")]])
            print(f"wemask: error: {message} (see '{command} --help')", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)  # an int is typer.Exit's code (--help: 0, Ctrl-C in training: 130)
