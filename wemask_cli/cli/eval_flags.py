"""The flags of `wemask eval`, whose help names the registered eval tasks (plugins' too), and the flags the tasks
declare (tasks.base.TASK_FLAGS, each task's `options`): imported only when the command is built (cli/eval.py).
The work is commands/eval.py, the table and curve render/eval.py."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Optional

import typer

from wemask_cli.cli.options import (
    BaseQuantizationOpt,
    DataParallelOpt,
    DtypeOpt,
    EngineOpt,
    LayersOpt,
    MeLayerOpt,
    ModelOpt,
    SelectOpt,
    StrengthOpt,
    TensorParallelOpt,
    TokensOpt,
    TrustRemoteCodeOpt,
    VllmMemoryOpt,
)
from wemask_cli.commands import DEFAULT_ENGINE
from wemask_cli.eval.quantize.schemes import DEFAULT_BLOCK_SIZE, block_size_help, quantize_help  # torch-free registry
from wemask_cli.eval.tasks.base import TASK_FLAGS, TaskFlag
from wemask_cli.eval.tasks.registry import accepting, declaring, task_flags, task_help, tasks  # torch-free registry
from wemask_cli.runtime.progress import warn
from wemask_cli.runtime.ranks import is_main_process

Text = Optional[str]


def tasks_with(test) -> str:
    """'perplexity' / 'choice/math': the registered tasks a flag applies to, for its help."""
    return "/".join(accepting(test))


def task_parameter(flag: TaskFlag) -> inspect.Parameter:
    """The parameter of one task flag, its help naming the tasks that take it."""
    option = typer.Option(*flag.spellings, help=flag.help.replace("{tasks}", declaring(flag)))
    return inspect.Parameter(flag.dest, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[flag.type], option])


def free(flag: TaskFlag, names: list[str]) -> bool:
    """Whether a task's own flag is not one of the command's (else it is left out, with one warning line)."""
    taken = {f"--{name.replace('_', '-')}" for name in names}
    if flag.dest not in names and not taken & set(flag.spellings):
        return True
    warn(f"the eval task option {flag.name} ({flag.dest}) is already a flag of wemask eval; it is left out: rename it")
    return False


def with_task_flags(command):
    """`command` with every task flag in its signature (what typer reads), in `wemask eval --help`'s order: the shared
    ones after --top-p, the tasks' own after --chat-template. Their values reach it as keyword arguments."""
    signature = inspect.signature(command, eval_str=True)
    params = [p.replace(kind=p.KEYWORD_ONLY) for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    names = [p.name for p in params]
    shared, own = names.index("top_p") + 1, names.index("chat_template") + 1
    flags = task_flags()
    params[own:own] = [task_parameter(flag) for flag in flags[len(TASK_FLAGS):] if free(flag, names)]
    params[shared:shared] = [task_parameter(flag) for flag in flags[: len(TASK_FLAGS)]]
    command.__signature__ = signature.replace(parameters=params)
    return command


GENERATION_LENGTHS = ", ".join(f"{name} {cls.max_new_tokens}" for name, cls in tasks().items() if cls.max_new_tokens)
GENERATING, FEWSHOT, TEMPLATED = (tasks_with(lambda c: c.generates), tasks_with(lambda c: c.fewshot),
                                  tasks_with(lambda c: c.template is not None))


# One parameter per flag (typer): long by nature, no logic here. The task flags come from the tasks' declarations.
@with_task_flags
def eval_(
    model: ModelOpt = None,
    task: Annotated[Text, typer.Option("--task", "-t", help=task_help())] = None,
    data: Annotated[
        Text,
        typer.Option(help="Local .jsonl/.json/.csv/.parquet file, a folder of them, a plain text file of any name, or a hub dataset "
                     "(default: the bundled eval set)."),
    ] = None,
    split: Annotated[Text, typer.Option(help="Hub split (default test); local files: train or a slice like 'train[:100]'.")] = None,
    data_config: Annotated[Text, typer.Option(help="Hub dataset configuration (e.g. main for gsm8k, all for cais/mmlu).")] = None,
    mask_rates: Annotated[
        Text,
        typer.Option("--mask-rates", "--mask-rate", "-r",
                     help="Comma list of rates in [0, 1]; default: the model directory's saved wemask_config.json, else no mask."),
    ] = None,
    me_layer: MeLayerOpt = None,
    select: SelectOpt = None,
    layers: LayersOpt = None,
    strength: StrengthOpt = None,
    tokens: TokensOpt = None,
    quantize: Annotated[Text, typer.Option(help=quantize_help())] = None,
    fp4_block_size: Annotated[int, typer.Option(help=block_size_help())] = DEFAULT_BLOCK_SIZE,
    smoothquant: Annotated[Optional[float], typer.Option(help="--quantize: SmoothQuant α in [0, 1], calibrated on the task's first sequences.")] = None,
    seeds: Annotated[int, typer.Option(help=f"Seeds per setting ({GENERATING}: sampled at --temperature; the others are deterministic: 1).")] = 1,
    limit: Annotated[Optional[int], typer.Option(help="Use the first N examples (perplexity: N windows).")] = None,
    batch_size: Annotated[str, typer.Option(help="Sequences per forward / generate call, or 'auto' (the largest that fits).")] = "8",
    num_fewshot: Annotated[int, typer.Option(help=f"{FEWSHOT} (and lm-eval): k solved examples before each question, drawn with --fewshot-seed.")] = 0,
    fewshot_seed: Annotated[int, typer.Option(help="Seed of the few-shot draw (recorded).")] = 1234,
    max_new_tokens: Annotated[Optional[int], typer.Option(help=f"Generation length (default {GENERATION_LENGTHS}).")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default 0 = greedy; 0.7 when --seeds > 1).")] = None,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling when sampling.")] = 1.0,
    prompt_template: Annotated[
        Text,
        typer.Option(help=f"{TEMPLATED}: prompt with a {{question}} placeholder (choice default: 'Question: {{question}}\\nAnswer:')."),
    ] = None,
    chat_template: Annotated[
        Optional[bool],
        typer.Option("--chat-template/--no-chat-template",
                     help="Wrap prompts in the chat template (default: on for math and refusal, off for choice and lm-eval)."),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output directory (default runs/eval/TASK-TIME, never shared).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier wemask output in --output (never other files).")] = False,
    dtype: DtypeOpt = "auto",
    base_quantization: BaseQuantizationOpt = "recorded",
    engine: EngineOpt = DEFAULT_ENGINE,
    vllm_memory: VllmMemoryOpt = None,
    tensor_parallel_size: TensorParallelOpt = 1,
    data_parallel_size: DataParallelOpt = 1,
    trust_remote_code: TrustRemoteCodeOpt = False,
    **task_values,  # the task flags (with_task_flags)
):
    """`wemask eval` (its help: cli/eval.py's eval_help)."""
    from dataclasses import fields

    from wemask_cli.commands.eval import EvalRequest, run_eval
    from wemask_cli.eval.settings import EvalSettings, parse_batch_size
    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.render.common import console, err_console
    from wemask_cli.render.curve import eval_curve_png
    from wemask_cli.render.eval import eval_tables

    shared = {f.name for f in fields(EvalSettings)}
    options = {dest: value for dest, value in task_values.items() if dest not in shared and value is not None}
    request = EvalRequest(
        model=model, mask=MaskRequest.parse(mask_rates, me_layer, select, layers, strength, tokens), output=output,
        overwrite=overwrite, dtype=dtype, base_quantization=base_quantization, quantize=quantize, fp4_block_size=fp4_block_size,
        smoothquant=smoothquant, engine=engine, vllm_memory=vllm_memory, trust_remote_code=trust_remote_code,
        parallel=(tensor_parallel_size, data_parallel_size),
        settings=EvalSettings(
            task=task, data=data, split=split, data_config=data_config, limit=limit, batch_size=parse_batch_size(batch_size),
            max_new_tokens=max_new_tokens, seeds=seeds, temperature=temperature, top_p=top_p, prompt_template=prompt_template,
            chat_template=chat_template, num_fewshot=num_fewshot, fewshot_seed=fewshot_seed, options=options or None,
            **{dest: value for dest, value in task_values.items() if dest in shared},
        ),
    )
    document, folder, written = run_eval(request, plot=lambda doc, out: eval_curve_png(doc, out / "curve.png"))
    if not is_main_process():
        return  # under a launcher the main process speaks for all
    for table in eval_tables(document, console.width):  # fits the terminal: no header cut
        console.print(table)
    err_console.print(f"Wrote {', '.join(p.name for p in written)} to {folder}")
