"""`wemask sft|dpo|grpo|kto|rloo|eval|infer ... --num_processes N --accelerate_config NAME`: the run started through
accelerate, as `trl sft` does (trl/cli/commands/training.py).

A flag that is neither wemask's nor TRL's config class's but one of `accelerate launch`'s is a launch flag. The
process that reads them takes them off its own command line and runs accelerate's launcher in-process (accelerate's
own parser and `launch_command`, as TRL's CLI does) on `-m wemask_cli` and the rest of the command line; it claims
no folder and writes nothing: the processes it starts do the run, and it exits with their exit code.
`--accelerate_config` names a config file or a preset: wemask's (resources/accelerate: ddp, fsdp, zero2, zero3, which
run on the CPU too) or TRL's (trl/accelerate_configs). What accelerate would not run as asked is one line first.
Importing this module imports nothing heavy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.ranks import launcher

PRESET_FLAG = "--accelerate_config"
PRESET_NAMES = {PRESET_FLAG: True, "--accelerate-config": True}  # {spelling: takes a value}, as launch_names gives


@dataclass(frozen=True)
class LaunchFlag:
    """A launch flag `--help` lists (every other `accelerate launch` option passes through too)."""

    dest: str
    type: type
    metavar: str
    help: str

    @property
    def names(self) -> tuple[str, str]:
        return f"--{self.dest}", f"--{self.dest.replace('_', '-')}"


SHOWN = (
    LaunchFlag("num_processes", int, "N", "Start N processes (on the CPU with a preset or --multi_gpu: gloo)."),
    LaunchFlag("accelerate_config", str, "NAME|PATH", "An accelerate config file, or a preset: wemask's ddp, fsdp, zero2, "
               "zero3 (they run on the CPU too) or TRL's fsdp1, fsdp2, multi_gpu, single_gpu, zero1."),
    LaunchFlag("num_machines", int, "N", "Nodes of the run."),
    LaunchFlag("machine_rank", int, "I", "This node's rank."),
    LaunchFlag("main_process_ip", str, "IP", "The address of node 0."),
    LaunchFlag("main_process_port", int, "PORT", "The port of node 0."),
    LaunchFlag("mixed_precision", str, "no|bf16|fp16|fp8", "The precision of every process (sets the trainer's bf16/fp16)."),
)
SHOWN_NAMES = frozenset(name for flag in SHOWN for name in flag.names)
WEMASK_SETS = frozenset(("-m", "--module", "--no_python", "--no-python", "-h", "--help"))  # how wemask is started


def accelerate_parser():
    """accelerate's own `accelerate launch` parser, its usage errors as one WeMaskError line."""
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()

    def one_line(message: str):
        raise WeMaskError(f"accelerate launch: {message}")

    parser.error = one_line
    return parser


def launch_names(own_flags, trl_flags) -> dict[str, bool]:
    """{spelling: takes a value} of every launch flag: accelerate's options and --accelerate_config, less the ones
    wemask or TRL's config class take (--gradient_accumulation_steps, --debug are TRL's)."""
    from wemask_cli.compat.argparse import parser_actions

    names = dict(PRESET_NAMES)
    try:
        actions = parser_actions(accelerate_parser())
    except ImportError:  # accelerate (or torch) cannot be imported: nothing can launch, its flags are unknown ones
        actions = []
    for action in actions:
        names.update({name: action.nargs != 0 for name in action.option_strings})
    taken = (set(own_flags) - SHOWN_NAMES) | set(trl_flags) | WEMASK_SETS
    return {name: value for name, value in names.items() if name not in taken}


def split(tokens: list[str], names: dict[str, bool]) -> tuple[list[str], list[str]]:
    """(the launch flags with their values, the other tokens), each in order."""
    launch, rest = [], []
    tokens = iter(tokens)
    for token in tokens:
        flag, eq, _ = token.partition("=")
        if flag not in names:
            rest.append(token)
            continue
        launch.append(token)
        if names[flag] and not eq:
            launch.append(next(tokens, ""))
    return launch, rest


def launch_flags_in(shown_values: dict, extra_args: list[str], own_flags, trl_flags) -> tuple[dict | None, list[str]]:
    """({spelling: takes a value} of the launch flags when one was given, else None; `extra_args` less them).
    accelerate's parser is read only when a flag --help lists has a value or a flag is neither wemask's nor TRL's."""
    known = set(trl_flags) | set(own_flags)
    unknown = [token for token in extra_args if token.startswith("-") and token.partition("=")[0] not in known]
    given = any(value is not None for value in shown_values.values())
    if not (given or unknown):
        return None, extra_args
    names = launch_names(own_flags, trl_flags)
    launch, rest = split(extra_args, names)
    return (names if given or launch else None), rest


def preset_args(launch_args: list[str]) -> list[str]:
    """--accelerate_config NAME|PATH as accelerate's --config_file: a file, wemask's preset, else TRL's."""
    from wemask_cli.resources import accelerate_presets

    given, rest = split(launch_args, PRESET_NAMES)
    if not given:
        return launch_args
    if any(token.partition("=")[0] in ("--config_file", "--config-file") for token in rest):
        raise WeMaskError(f"{PRESET_FLAG} and --config_file both name the accelerate config: give one")
    value = preset_named(launch_args)
    ours = accelerate_presets()
    if value in ours and not Path(value).is_file():
        return ["--config_file", str(ours[value]), *rest]
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    try:
        return resolve_accelerate_config_argument([PRESET_FLAG, value, *rest])
    except ValueError:
        trl = sorted(item.name.removesuffix(".yaml") for item in trl_presets())
        raise WeMaskError(
            f"{PRESET_FLAG} {value!r} is neither a file nor a preset: wemask's are {', '.join(ours)} (they run on the CPU "
            f"too), TRL's {', '.join(n for n in trl if n not in ours)}"
        ) from None


def trl_presets():
    """TRL's preset files (trl/accelerate_configs)."""
    from importlib import resources

    return [item for item in resources.files("trl.accelerate_configs").iterdir() if item.name.endswith(".yaml")]


def preset_named(launch_args: list[str]) -> str | None:
    """The value of --accelerate_config (the last one given), or None."""
    given, _ = split(launch_args, PRESET_NAMES)
    return (given[-1].partition("=")[2] if given[-1].startswith("--") else given[-1]) if given else None


def planned(parsed, launch_args: list[str]) -> dict:
    """What accelerate will run, flags over the config file as accelerate reads them: distributed type, processes,
    FSDP version."""
    from accelerate.commands.config import default_config_file
    from accelerate.commands.config.config_args import load_config_from_file

    config = None
    if parsed.config_file is not None or os.path.isfile(default_config_file):
        try:
            config = load_config_from_file(parsed.config_file)
        except FileNotFoundError:
            raise WeMaskError(f"--config_file {parsed.config_file}: no such file; give an accelerate config file") from None
        except (OSError, ValueError) as err:
            raise WeMaskError(f"--config_file {parsed.config_file}: not a readable accelerate config ({err})") from None
    kinds = {"cpu": "NO", "use_fsdp": "FSDP", "use_deepspeed": "DEEPSPEED", "multi_gpu": "MULTI_GPU"}
    kind = next((kind for flag, kind in kinds.items() if getattr(parsed, flag)), None)
    if kind is None:
        kind = str(getattr(config.distributed_type, "value", config.distributed_type)) if config else "NO"
    fsdp_version = (config.fsdp_config or {}).get("fsdp_version", 1) if config else 1
    if any(token.partition("=")[0] in ("--fsdp_version", "--fsdp-version") for token in launch_args):
        fsdp_version = parsed.fsdp_version
    processes = parsed.num_processes or (config.num_processes if config else None) or 1
    return {"kind": kind, "processes": int(processes), "fsdp_version": int(fsdp_version), "config": config}


def check_runs_here(plan: dict, parsed, preset: str | None) -> None:
    """One line for what accelerate would not run as asked: a launch inside a launch, N processes that accelerate
    would start as one, FSDP1 without GPUs."""
    import torch

    started_by = launcher()
    if started_by != "single process":
        raise WeMaskError(f"the launch flags start processes, and this one was started by {started_by}: give them to "
                          f"{started_by}, or run wemask without it")
    gpus = torch.cuda.device_count()
    asked = f"--accelerate_config {preset}" if preset else "the accelerate config" if plan["config"] else "no accelerate config"
    one_process = plan["kind"] == "NO" and (parsed.cpu or plan["config"] or gpus < 2)
    if plan["processes"] > 1 and one_process:
        given = "--cpu" if parsed.cpu else asked
        raise WeMaskError(
            f"--num_processes {plan['processes']} with {given} starts one process (accelerate launch's distributed type NO): "
            f"{'drop --cpu and ' if parsed.cpu else ''}add --accelerate_config ddp (DDP; over gloo on the CPU) or --multi_gpu"
        )
    if gpus == 0 and plan["kind"] == "FSDP" and plan["fsdp_version"] == 1:
        raise WeMaskError(f"{asked} runs FSDP1, which needs GPUs: on the CPU use --accelerate_config fsdp (FSDP2)")


def failed_exit_code(err: BaseException) -> int | None:
    """The exit code of the processes accelerate started, from the error its launcher raised (None: another error)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if isinstance(err, subprocess.CalledProcessError):
        return err.returncode
    if isinstance(err, ChildFailedError):
        code = err.get_first_failure()[1].exitcode
        return code if code > 0 else 128 - code  # killed by signal N: 128 + N, as a shell says
    return None


def launch(names: dict[str, bool]) -> int:
    """`accelerate launch LAUNCH_FLAGS -m wemask_cli REST` with this process's command line split by `names`,
    in this process (accelerate's launcher); the exit code of the processes it started."""
    from accelerate.commands.launch import launch_command

    launch_args, rest = split(sys.argv[1:], names)
    resolved = preset_args(launch_args)
    parsed = accelerate_parser().parse_args([*resolved, "--module", "wemask_cli", *rest])
    check_runs_here(planned(parsed, resolved), parsed, preset_named(launch_args))
    try:
        launch_command(parsed)
    except ValueError as err:  # accelerate's checks of the launch flags, before anything starts
        raise WeMaskError(f"accelerate launch: {err}") from None
    except Exception as err:
        code = failed_exit_code(err)
        if code is None:
            raise
        return code
    return 0
