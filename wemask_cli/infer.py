"""`wemask infer`: generate with and without WeMask, one model load for any number of mask rates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import read_text
from .errors import WeMaskError
from .method.config import WeMaskConfig
from .method.mask import apply_wemask, remove_wemask


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


def render_prompt(tokenizer, prompt: str | list[dict], chat_template: bool) -> tuple[str, bool]:
    """The text to tokenize, and whether special tokens still need adding (not after a chat template)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), False
    if isinstance(prompt, list):
        return "\n".join(message["content"] for message in prompt), True
    return prompt, True


@torch.no_grad()
def generate(model, tokenizer, prompts: list, settings: GenerationSettings) -> list[str]:
    """Batched generation with left padding; greedy unless a temperature is given."""
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    completions = []
    torch.manual_seed(settings.seed)
    sampling = settings.temperature > 0
    for start in range(0, len(prompts), settings.batch_size):
        rendered = [render_prompt(tokenizer, p, settings.chat_template) for p in prompts[start : start + settings.batch_size]]
        batch = tokenizer(
            [text for text, _ in rendered], return_tensors="pt", padding=True, add_special_tokens=rendered[0][1]
        ).to(device)
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
    return completions


def run_infer(loaded, prompts: list, configs: list[WeMaskConfig | None], settings: GenerationSettings) -> list[dict]:
    """Generate once per config (None: no mask) with one loaded model; one record per prompt and config."""
    records = []
    for config in configs:
        resolved = apply_wemask(loaded.model, config).config if config is not None else None
        try:
            completions = generate(loaded.model, loaded.tokenizer, prompts, settings)
        finally:
            remove_wemask(loaded.model)
        for prompt, completion in zip(prompts, completions):
            records.append(
                {
                    "input": prompt,
                    "completion": completion,
                    "mask_rate": resolved.mask_rate if resolved else 0.0,
                    "wemask": resolved.to_dict() if resolved else None,
                }
            )
    return records


def write_jsonl(records: list[dict], path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
