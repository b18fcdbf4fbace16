"""Every sequence starts with BOS where the tokenizer's own metadata says so, whatever the transformers version.

transformers 5 drops tokenizer_config.json's `add_bos_token` when the folder has a tokenizer.json (its post-processor
alone decides), and transformers before 5.24 ignores a GGUF file's `tokenizer.ggml.add_bos_token`: a Gemma-3 GGUF then
encodes without `<bos>`, the token its massive activation sits on. load_model fixes the tokenizer object itself, so
every consumer (wemask's prompts, TRL's SFT/DPO/GRPO tokenization, lm-eval) sees the same first token.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

from wemask_cli.runtime.progress import warn

TOKENIZER_CONFIG = "tokenizer_config.json"
ADD_BOS = "add_bos_token"  # tokenizer_config.json's key, and GGUF_RECORD's
GGUF_RECORD = "wemask_gguf_tokenizer.json"  # in a folder converted from a GGUF file: {"gguf": name, "add_bos_token": flag}
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGUF_STRING, GGUF_ARRAY = 8, 9  # the two variable-length metadata types
PROBE_TEXT = "Hello"
PROBE_CHAT = [{"role": "user", "content": PROBE_TEXT}]


def gguf_add_bos(path: Path) -> bool | None:
    """What a GGUF file says about BOS, read as transformers 5.24 reads it: `tokenizer.ggml.add_bos_token`; without
    it a SentencePiece ('llama') vocabulary adds BOS (llama.cpp's default); Gemma 4 adds none (its chat template writes
    `<bos>`); None when the file does not say."""
    fields = gguf_fields(path, {"tokenizer.ggml.model", "tokenizer.ggml.add_bos_token"})
    vocabulary, flag = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.add_bos_token")
    if vocabulary == "gemma4":
        return False
    if flag is None and vocabulary == "llama":
        return True
    return None if flag is None else bool(flag)


def gguf_fields(path: Path, keys: set[str]) -> dict:
    """The scalar and string values of `keys` in a GGUF file's metadata (v2/v3), read from its header alone: the
    vocabulary arrays are skipped, not decoded (gguf-py's GGUFReader decodes them all: seconds on a 49k vocabulary)."""
    with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        if blob[:4] != b"GGUF":
            raise ValueError(f"{Path(path).name} does not start with the GGUF magic bytes")
        _, _, count = struct.unpack_from("<IQQ", blob, 4)
        position, found = 24, {}
        for _ in range(count):
            key, position = gguf_string(blob, position)
            (kind,) = struct.unpack_from("<I", blob, position)
            value, position = gguf_value(blob, position + 4, kind)
            if key in keys:
                found[key] = value
                if len(found) == len(keys):
                    break
        return found


def gguf_string(blob, position: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", blob, position)
    return blob[position + 8 : position + 8 + length].decode("utf-8", "replace"), position + 8 + length


def gguf_value(blob, position: int, kind: int):
    """(a metadata value, the offset after it); an array is skipped and reads as None."""
    if kind in GGUF_SCALARS:
        return struct.unpack_from(GGUF_SCALARS[kind], blob, position)[0], position + struct.calcsize(GGUF_SCALARS[kind])
    if kind == GGUF_STRING:
        return gguf_string(blob, position)
    if kind != GGUF_ARRAY:
        raise ValueError(f"GGUF metadata value of unknown type {kind}")
    element, count = struct.unpack_from("<IQ", blob, position)
    position += 12
    if element in GGUF_SCALARS:
        return None, position + count * struct.calcsize(GGUF_SCALARS[element])
    if element != GGUF_STRING:
        raise ValueError(f"GGUF metadata array of type {element}, which wemask cannot skip")
    for _ in range(count):
        position += 8 + struct.unpack_from("<Q", blob, position)[0]
    return None, position


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
    from wemask_cli.runtime.atomic import atomic_write_text

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
    prompt starts as a text one does (a template that writes BOS anywhere is left as it is: one BOS, never two)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not adds_bos(tokenizer):
        return
    from jinja2 import TemplateError

    try:
        rendered = tokenizer.apply_chat_template(PROBE_CHAT, add_generation_prompt=True, tokenize=False)
    except (TemplateError, ValueError, KeyError, TypeError):  # a template that wants other roles or variables
        return
    if isinstance(rendered, str) and tokenizer.bos_token not in rendered:
        tokenizer.chat_template = "{{ bos_token }}" + template
