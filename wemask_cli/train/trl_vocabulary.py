"""TRL's own names for wemask's training options, so a TRL user's flags and recipes work unchanged.

TRL's scripts read `ScriptArguments` (dataset_name, dataset_config, dataset_train_split, dataset_test_split) and
`ModelConfig` (model_name_or_path, dtype/torch_dtype, LoRA and bitsandbytes fields). The ones wemask already has
under another name are aliases (here); the rest are TrainOptions fields of the same name (options.py). Flags take
either spelling (--lora_r or --lora-r) and TRL's space-separated lists (--lora-target-modules q_proj v_proj).
Importing this module imports nothing heavy.
"""

from __future__ import annotations

ALIASES = {  # TRL's name -> wemask's option
    "model_name_or_path": "model",
    "dataset_name": "dataset",
    "dataset_train_split": "dataset_split",
    "dataset_test_split": "eval_split",
    "torch_dtype": "dtype",
    "reward_funcs": "reward",  # GRPO's ScriptArguments
}
LIST_OPTIONS = ("lora_target_modules", "lora_modules_to_save", "reward")  # comma lists in wemask, space-separated in TRL


def canonical_key(key) -> str:
    """A recipe key as wemask's option name: dashes as underscores, TRL's aliases resolved."""
    name = str(key).replace("-", "_")
    return ALIASES.get(name, name)


def alias_flags(option: str) -> tuple[str, ...]:
    """The extra flag names of `option` (TRL's spelling, dashed), e.g. model -> ('--model-name-or-path',)."""
    return tuple(f"--{trl.replace('_', '-')}" for trl, ours in ALIASES.items() if ours == option)


def trl_spellings(args: list[str], own_flags: set[str]) -> list[str]:
    """Command-line tokens with TRL's habits translated: `--lora_r` -> `--lora-r` for wemask's own options (TRL's
    keep theirs: its parser takes both), and `--lora-target-modules q_proj v_proj` -> `... q_proj,v_proj`."""
    lists = {flag for name in LIST_OPTIONS for flag in (f"--{name.replace('_', '-')}", *alias_flags(name))}
    out: list[str] = []
    state = None  # "flag": a list flag waits for its first value; "values": later values join it
    for token in args:
        if state and not token.startswith("-"):
            if state == "flag":
                out.append(token)
            else:
                out[-1] = f"{out[-1]},{token}"
            state = "values"
            continue
        flag, eq, value = token.partition("=")
        if flag.startswith("--") and "--" + flag[2:].replace("_", "-") in own_flags:
            flag = "--" + flag[2:].replace("_", "-")
            token = flag + eq + value
        out.append(token)
        state = "flag" if flag in lists and not eq else None
    return out
