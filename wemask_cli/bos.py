"""Every sequence starts with BOS where the tokenizer's own metadata says so, whatever the transformers version.

transformers 5 drops tokenizer_config.json's `add_bos_token` when the folder has a tokenizer.json (its post-processor
alone decides), and transformers before 5.24 ignores a GGUF file's `tokenizer.ggml.add_bos_token`: a Gemma-3 GGUF then
encodes without `<bos>`, the token its massive activation sits on. load_model fixes the tokenizer object itself, so
every consumer (wemask's prompts, TRL's SFT/DPO/GRPO tokenization, lm-eval) sees the same first token.
"""

from __future__ import annotations

import json
from pathlib import Path

from .progress import warn

TOKENIZER_CONFIG = "tokenizer_config.json"
ADD_BOS = "add_bos_token"  # tokenizer_config.json's key, and GGUF_RECORD's
GGUF_RECORD = "wemask_gguf_tokenizer.json"  # in a folder converted from a GGUF file: {"gguf": name, "add_bos_token": flag}
PROBE_TEXT = "Hello"
PROBE_CHAT = [{"role": "user", "content": PROBE_TEXT}]


def gguf_add_bos(path: Path) -> bool | None:
    """What a GGUF file says about BOS, read as transformers 5.24 reads it: `tokenizer.ggml.add_bos_token`; without
    it a SentencePiece ('llama') vocabulary adds BOS (llama.cpp's default); Gemma 4 adds none (its chat template writes
    `<bos>`); None when the file does not say."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields

    def value(key: str):
        return fields[key].contents() if key in fields else None

    vocabulary, flag = value("tokenizer.ggml.model"), value("tokenizer.ggml.add_bos_token")
    if vocabulary == "gemma4":
        return False
    if flag is None and vocabulary == "llama":
        return True
    return None if flag is None else bool(flag)


def declared_add_bos(source: str, revision: str | None = None) -> bool | None:
    """What a tokenizer folder (or a hub id's cached files) says about BOS: the flag its GGUF file had, recorded by the
    conversion (GGUF_RECORD); else tokenizer_config.json's `add_bos_token` when true (None: it does not say; a false
    one is left to tokenizer.json, which transformers follows)."""
    recorded = Path(source) / GGUF_RECORD
    if recorded.is_file():
        return json.loads(recorded.read_text(encoding="utf-8")).get(ADD_BOS)
    from transformers.utils import cached_file

    path = cached_file(source, TOKENIZER_CONFIG, revision=revision, _raise_exceptions_for_missing_entries=False,
                       _raise_exceptions_for_connection_errors=False)
    if path is None:
        return None
    return True if json.loads(Path(path).read_text(encoding="utf-8")).get(ADD_BOS) is True else None


def record_gguf_add_bos(folder: Path, gguf: Path) -> None:
    """Write GGUF_RECORD into a folder converted from `gguf` (at conversion, or once into an older conversion)."""
    from .atomic import atomic_write_text

    atomic_write_text(folder / GGUF_RECORD, json.dumps({"gguf": gguf.name, ADD_BOS: gguf_add_bos(gguf)}) + "\n")


def adds_bos(tokenizer) -> bool:
    """Whether encoding a text with special tokens puts the BOS token first."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_special = tokenizer(PROBE_TEXT, add_special_tokens=True)["input_ids"]
    return with_special[:1] == [bos] and tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"][:1] != [bos]


def starts_with_bos(tokenizer, ids: list[int]) -> bool:
    """Whether these token ids begin with the tokenizer's BOS token (False when it has none)."""
    return tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id]


def match_bos(tokenizer, add_bos: bool | None, source: str) -> None:
    """Make `tokenizer` add BOS (or not) as its metadata `add_bos` says (None: leave it); `source` names it in warnings."""
    if add_bos is not None and add_bos != adds_bos(tokenizer):
        if add_bos and tokenizer.bos_token_id is None:
            warn(f"{source}: its tokenizer metadata says to add a BOS token, but the tokenizer names none: prompts start "
                 "without one")
            return
        tokenizer.add_bos_token = add_bos  # rebuilds the post-processor (transformers' TokenizersBackend)
        if adds_bos(tokenizer) != add_bos:
            warn(f"{source}: could not make its {type(tokenizer).__name__} {'add' if add_bos else 'drop'} the BOS token "
                 "its metadata asks for: prompts may start differently from what the model was trained on")


def write_bos_in_chat_template(tokenizer) -> None:
    """When the tokenizer adds BOS: prefix `{{ bos_token }}` to a chat template that renders without it, so a chat
    prompt starts as a text one does (a template that writes BOS itself is left as it is: one BOS, never two)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not adds_bos(tokenizer):
        return
    from jinja2 import TemplateError

    try:
        rendered = tokenizer.apply_chat_template(PROBE_CHAT, add_generation_prompt=True, tokenize=False)
    except (TemplateError, ValueError, KeyError, TypeError):  # a template that wants other roles or variables
        return
    if isinstance(rendered, str) and not rendered.startswith(tokenizer.bos_token):
        tokenizer.chat_template = "{{ bos_token }}" + template
