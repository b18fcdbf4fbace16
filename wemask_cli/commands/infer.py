"""`wemask infer`: generate with and without WeMask, one model load for any number of mask rates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..data import read_text
from ..errors import WeMaskError
from ..method.config import WeMaskConfig
from ..outputs import atomic_write_text, dumps_strict
from ..prompts import context_length, encode_left_truncated, warn_truncated


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 8
    chat_template: bool = True

    def __post_init__(self) -> None:
        """Check the flags before any model is loaded."""
        if self.temperature < 0:
            raise WeMaskError(f"--temperature {self.temperature:g} is not valid: use 0 (greedy) or a positive number to sample")
        if not 0 < self.top_p <= 1:
            raise WeMaskError(f"--top-p {self.top_p:g} is out of range: use a number in (0, 1]")
        for flag, value in (("--batch-size", self.batch_size), ("--max-new-tokens", self.max_new_tokens)):
            if value < 1:
                raise WeMaskError(f"{flag} {value} is not valid: use 1 or more")


def read_prompts(prompts: list[str] | None, input_file: Path | None) -> list[str | list[dict]]:
    """Prompts from --prompt flags, or a file: jsonl with `prompt` or `messages`, else plain text lines."""
    if prompts and input_file:
        raise WeMaskError("give prompts either with --prompt or with --input, not both")
    if prompts:
        return list(prompts)
    if input_file is None:
        raise WeMaskError("no prompt given: use --prompt TEXT (repeatable) or --input FILE (.jsonl or text lines)")
    lines = [line for line in read_text(input_file, "--input").splitlines() if line.strip()]
    if not lines:
        raise WeMaskError(f"--input {input_file} is empty: give one prompt per line or jsonl rows with 'prompt' or 'messages'")
    if not str(input_file).endswith((".jsonl", ".json")):
        return lines
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise WeMaskError(f"{input_file} line {number} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict) or not ({"prompt", "messages"} & row.keys()):
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise WeMaskError(f"{input_file} line {number} has no 'prompt' or 'messages' (found {found})")
        rows.append(row["messages"] if "messages" in row else row["prompt"])
    return rows


def generate(model, tokenizer, prompts: list, settings: GenerationSettings) -> tuple[list[str], list[int]]:
    """Batched generation with left padding, greedy unless a temperature is given; prompts longer than the
    model's context (less --max-new-tokens) are cut from the left. Returns the completions and each prompt's cut."""
    import torch

    positions = context_length(model)
    limit = None if positions is None else positions - settings.max_new_tokens
    if limit is not None and limit < 1:
        raise WeMaskError(f"--max-new-tokens {settings.max_new_tokens} leaves no room for a prompt in the model's {positions} positions")
    encoded, cuts = encode_left_truncated(tokenizer, prompts, settings.chat_template, limit)
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    completions = []
    torch.manual_seed(settings.seed)
    sampling = settings.temperature > 0
    for start in range(0, len(encoded), settings.batch_size):
        ids = encoded[start : start + settings.batch_size]
        batch = tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(device)
        with torch.no_grad():
            output = model.generate(
                **batch,
                max_new_tokens=settings.max_new_tokens,
                do_sample=sampling,
                temperature=settings.temperature if sampling else None,
                top_p=settings.top_p if sampling else None,
                top_k=None,
                pad_token_id=tokenizer.pad_token_id,
            )
        new_tokens = output[:, batch["input_ids"].shape[1] :]
        completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return completions, cuts


def run_infer(loaded, prompts: list, configs: list[WeMaskConfig | None], settings: GenerationSettings) -> list[dict]:
    """Generate once per config (None: no mask) with one loaded model; one record per prompt and config."""
    from ..method.mask import apply_wemask

    records, cuts = [], []
    for config in configs:
        handle = apply_wemask(loaded.model, config) if config is not None else None
        try:
            completions, cuts = generate(loaded.model, loaded.tokenizer, prompts, settings)
        finally:
            if handle is not None:
                handle.remove()
        resolved = handle.config if handle is not None else None
        for prompt, completion, cut in zip(prompts, completions, cuts):
            records.append(
                {
                    "input": prompt,
                    "completion": completion,
                    "mask_rate": resolved.mask_rate if resolved else 0.0,
                    "wemask": resolved.to_dict() if resolved else None,
                    "truncated": cut > 0,
                }
            )
    limit = context_length(loaded.model)
    if limit is not None:
        warn_truncated(cuts, limit - settings.max_new_tokens, f"the model's {limit} positions minus --max-new-tokens {settings.max_new_tokens}")
    return records


def write_jsonl(records: list[dict], path: Path) -> Path:
    """One strict-JSON line per record, written atomically."""
    lines = (json.dumps(json.loads(dumps_strict(record))) + "\n" for record in records)
    return atomic_write_text(path, "".join(lines))
