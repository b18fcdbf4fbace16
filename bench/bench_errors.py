"""Bad input: each error that needs no model (a missing dataset, columns no format reads, kto without labels, a hub
id offline, --me-layer past the model's layers, --engine vllm or --use-vllm without vLLM, a misspelled flag,
--mask-rate 3, and locate's: a hub id offline, a finished --json, a missing --prompts, --mask-rate 3) timed
against `wemask --help`, interleaved in one run, median of each; the ratio is the figure (goal: each well under
3 s on a quiet machine, which is a few times `wemask --help`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
BIN = Path(sys.executable).parent
CASES = {
    "missing dataset": ["sft", "--model", "MODEL", "--dataset", "DIR/no-such.jsonl"],
    "wrong columns": ["sft", "--model", "MODEL", "--dataset", "DIR/qa.jsonl"],
    "kto without labels": ["kto", "--model", "MODEL", "--dataset", "DIR/pc.jsonl"],
    "hub dataset offline": ["sft", "--model", "MODEL", "--dataset", "nobody/no-such-data"],
    "hub model offline": ["infer", "--model", "nobody/no-such-model", "-p", "hi"],
    "--me-layer 99": ["sft", "--model", "MODEL", "--dataset", "DIR/pc.jsonl", "--mask-rate", "0.3", "--me-layer", "99"],
    "--engine vllm without vLLM": ["infer", "--model", "MODEL", "-p", "hi", "--engine", "vllm"],
    "misspelled flag": ["sft", "--model", "MODEL", "--dataset", "DIR/pc.jsonl", "--lerning-rate", "1e-5"],
    "--mask-rate 3": ["sft", "--model", "MODEL", "--dataset", "DIR/pc.jsonl", "--mask-rate", "3"],
    "grpo --use-vllm without vLLM": ["grpo", "--model", "MODEL", "--dataset", "DIR/qa.jsonl", "--reward", "math", "--use-vllm"],
    "locate: hub model offline": ["locate", "--model", "nobody/no-such-model"],
    "locate: --json exists": ["locate", "--model", "MODEL", "--json", "DIR/pc.jsonl"],
    "locate: missing --prompts": ["locate", "--model", "MODEL", "--prompts", "DIR/no-such.jsonl"],
    "locate: --mask-rate 3": ["locate", "--model", "MODEL", "--mask-rate", "3"],
}


def tiny_model(folder: Path) -> str:
    """A tiny random Llama folder (no tokenizer: these errors come before one is read)."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=300)  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return str(folder)


def wall(command: list[str], env: dict, expect: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != expect:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}, not {expect}: {done.stderr.strip()[-300:]}")
    return seconds


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "qa.jsonl").write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
        (folder / "pc.jsonl").write_text(json.dumps({"prompt": "2+2?", "completion": "4"}) + "\n")
        model = tiny_model(folder / "tiny")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the hub cases are the offline ones
        cases = {name: args for name, args in CASES.items() if "vllm" not in name or importlib.util.find_spec("vllm") is None}
        commands = {"--help": ([str(BIN / "wemask"), "--help"], 0)}
        for name, args in cases.items():
            filled = [arg.replace("MODEL", model).replace("DIR", tmp) for arg in args]
            output = [] if args[0] in ("infer", "locate") else ["-o", str(folder / "out")]
            commands[name] = ([str(BIN / "wemask"), *filled, *output], 2)
        for command, expect in commands.values():
            wall(command, env, expect)  # warm the file cache once, and check each fails as it should
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(REPEATS):
            for name, (command, expect) in commands.items():
                times[name].append(wall(command, env, expect))
    median = {name: statistics.median(values) for name, values in times.items()}
    figures = {"wemask --help s (median)": median["--help"]}
    for name in cases:
        figures[f"{name} s (median)"] = median[name]
        figures[f"{name} / wemask --help"] = median[name] / median["--help"]
    return figures
