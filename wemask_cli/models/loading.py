"""load_model(): one way for every command to load a model and its tokenizer.

`--model` is a hub id, a local Hugging Face directory (a full model or a LoRA adapter), a `.gguf` file, or
nothing / 'default' for the embedded SmolLM2-135M-Instruct. GGUF files are dequantized once into a plain
model under the cache directory, so later loads take a second or two.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.models.bos import declared_add_bos, match_bos, write_bos_in_chat_template
from wemask_cli.models.weights import require_finite_file, require_finite_model
from wemask_cli.outputs import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE
from wemask_cli.runtime import progress
from wemask_cli.runtime.errors import WeMaskError, first_line
from wemask_cli.runtime.tested import warn_untested_versions

if TYPE_CHECKING:
    from wemask_cli.interventions import Installation
    from wemask_cli.interventions.saved import SavedRun
from wemask_cli.models.quantization import base_quantization, quantization_config, quantized_device_map
from wemask_cli.models.sources import resolve_source

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# what loading a model raises for missing or bad files: files, hub and network (OSError and huggingface_hub's errors),
# a bad config.json or unknown model type (ValueError), a malformed tokenizer.json (KeyError), corrupt weights
LOAD_ERRORS = (OSError, ValueError, KeyError, SafetensorError)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    source: str  # the directory or hub id the weights came from (TRL rebuilds reference models from it)
    saved: SavedRun | None = None  # the interventions the model directory carries (interventions.json or wemask_config.json)
    installed: Installation | None = None  # the saved interventions other than WeMask, installed by load_model

    @property
    def saved_wemask(self) -> WeMaskConfig | None:
        """The saved WeMask config (applied per mask rate through masking.MaskRequest, not at load)."""
        return self.saved.wemask if self.saved else None


def resolve_dtype(dtype: str) -> torch.dtype | str:
    """'auto' keeps the checkpoint's dtype on a GPU and uses float32 on the CPU (bf16 matmuls are slow there)."""
    if dtype == "auto":
        return "auto" if torch.cuda.is_available() else torch.float32
    if dtype not in DTYPES:
        raise WeMaskError(f"--dtype {dtype!r} is not valid: use auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def from_pretrained_options(weights_from: str, torch_dtype, quantization: str | None, pretrained: dict | None):
    """(the tokenizer's hub options, the model's from_pretrained keyword arguments) for load_model. trust_remote_code
    is always given, True or False: left out, transformers would ask on stdin (and `yes |` would answer)."""
    options = {k: v for k, v in (pretrained or {}).items() if v is not None}
    quant = quantization_config(quantization, options.pop("quant_type", "nf4"), options.pop("nested", True))
    hub = {k: options.pop(k) for k in ("revision",) if k in options}
    hub["trust_remote_code"] = bool(options.pop("trust_remote_code", False))
    kwargs = {"dtype": torch_dtype, **hub, **options}
    if hub.get("trust_remote_code"):
        progress.warn(f"--trust-remote-code: running the Python code that {weights_from} ships (only for sources you trust)")
    if quant is not None:
        kwargs.update(quantization_config=quant, device_map=quantized_device_map())
        if quantization == "4bit" and not torch.cuda.is_available():
            import bitsandbytes  # noqa: F401  (its CPU back-end decides the kernel when imported)

            from wemask_cli.compat.bitsandbytes import four_bit_kernel_line

            progress.say(four_bit_kernel_line())
    return hub, kwargs


def adapter_in_saved_dtypes(model, source: str) -> None:
    """Give each adapter weight the dtype it was saved in, i.e. trained in (TRL trains QLoRA adapters in bfloat16;
    PEFT's from_pretrained upcasts them to float32, which changes every output)."""
    from safetensors import safe_open

    if not (Path(source) / ADAPTER_WEIGHTS_FILE).is_file():
        return
    with safe_open(Path(source) / ADAPTER_WEIGHTS_FILE, "pt") as saved:
        dtypes = {key: saved.get_slice(key).get_dtype() for key in saved.keys()}
    names = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    for name, parameter in model.named_parameters():
        saved_as = names.get(dtypes.get(name.replace(".default.", ".")) or "")
        if saved_as is not None and parameter.dtype != saved_as:
            parameter.data = parameter.data.to(saved_as)


def load_model(
    spec: str | None = None,
    dtype: str = "auto",
    quantization: str | None = None,
    device: str | None = None,
    interventions: bool = True,
    pretrained: dict | None = None,
) -> LoadedModel:
    """Load model and tokenizer from the same source; a LoRA adapter directory loads its base model under it.

    `pretrained` holds from_pretrained options (TRL ModelConfig's revision, attn_implementation, trust_remote_code,
    and the 4-bit quant_type/nested settings); None values are left to transformers. `quantization` is 4bit, 8bit,
    None / 'none', or RECORDED: as the training run in the model directory loaded its base (base_quantization).

    A causal language model only (one line otherwise). With `interventions`, the saved interventions other than
    WeMask (GatedNorm, PreAffine, ...) are installed with their weights; trainers pass False and install them.
    """
    source = resolve_source(spec)
    torch_dtype = resolve_dtype(dtype)
    quantization, pretrained = base_quantization(source, quantization, pretrained)
    adapter = Path(source) / ADAPTER_CONFIG_FILE
    weights_from = source
    if adapter.is_file():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        if not base:
            raise WeMaskError(f"{adapter} names no base_model_name_or_path: cannot load the adapter's base model")
        weights_from = resolve_source(base)
    saved = saved_run(source)  # its intervention weights and adapter are checked before the model's are read
    require_finite_file(Path(source) / ADAPTER_WEIGHTS_FILE)
    hub, kwargs = from_pretrained_options(weights_from, torch_dtype, quantization, pretrained)
    quant = kwargs.get("quantization_config")
    tokenizer_from = source if (Path(source) / "tokenizer_config.json").is_file() else weights_from
    tokenizer, model = load_tokenizer_and_model(spec, tokenizer_from, weights_from, hub, kwargs)
    require_finite_model(model, weights_from)
    if adapter.is_file():
        model = load_adapter(model, source, weights_from)
        adapter_in_saved_dtypes(model, source)
    if quant is None:
        target = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model.to(target)
    model.eval()
    require_causal(model, spec)
    loaded = LoadedModel(model=model, tokenizer=tokenizer, source=source, saved=saved)
    if interventions and loaded.saved and loaded.saved.remedies:
        loaded.installed = loaded.saved.install(model, include_wemask=False)
        progress.say(f"Applying the interventions saved with {source}: {'; '.join(loaded.installed.describe())}")
    warn_untested_versions()  # the model loaded: the command's work starts (once per command)
    return loaded


def load_adapter(model, source: str, base: str):
    """The LoRA adapter of `source` on its base model (PEFT); an adapter trained on a model of another shape or
    architecture than `base` is one line (PEFT raises a size mismatch, or finds none of the adapter's modules)."""
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, source)
    except (RuntimeError, ValueError) as err:
        detail = _misfit(str(err))
        if detail is None:
            raise
        raise WeMaskError(
            f"{source}: PEFT cannot put this LoRA adapter on its base model {base} ({detail}): the adapter was trained "
            f"on another model; set base_model_name_or_path in {ADAPTER_CONFIG_FILE} to that model"
        ) from None


def _misfit(text: str) -> str | None:
    """The first adapter tensor PEFT found of another shape than the model's, or the modules it found none of; None
    for another error."""
    import re

    found = re.search(r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^]]*\])\) from checkpoint, "
                      r"the shape in current model is torch\.Size\((\[[^]]*\])\)", text)
    if found:
        name = found[1].removeprefix("base_model.model.").replace(".default.", ".")
        return f"{name} is {found[2]} in the adapter, {found[3]} in the model"
    if "size mismatch" in text:
        return next(line.strip() for line in text.splitlines() if "size mismatch" in line)[:200]
    if "not found in the base model" in text:
        return text.strip().splitlines()[0].split(". ")[0]
    return None


def load_tokenizer_and_model(spec: str | None, tokenizer_from: str, weights_from: str, hub: dict, kwargs: dict):
    """(tokenizer, model) by transformers; missing or bad files, or no network: one line (other errors are bugs).
    The model first: its config.json decides whether it needs its own code before the tokenizer reads that config."""
    from transformers import AutoModelForCausalLM

    loading = "config.json"
    try:
        model = AutoModelForCausalLM.from_pretrained(weights_from, **kwargs)
        loading = "tokenizer_config.json"
        tokenizer = load_tokenizer(tokenizer_from, hub)
    except (*LOAD_ERRORS, RuntimeError) as err:
        if isinstance(err, RuntimeError) and "ignore_mismatched_sizes" not in str(err):
            raise  # of RuntimeErrors only transformers' "the weights do not fit config.json" is the user's files
        if isinstance(err, ValueError) and "trust_remote_code" in str(err) and not hub.get("trust_remote_code"):
            raise WeMaskError(
                f"--model {spec or weights_from} ships its own Python code (an auto_map in its {loading}), which wemask "
                "runs only with --trust-remote-code: pass it if you trust the source (a run trained with it needs it again)"
            ) from None
        if Path(weights_from).is_dir():
            raise WeMaskError(
                f"could not load model {spec!r} from {weights_from} ({first_line(err)}): its files are incomplete or "
                "damaged (a truncated or interrupted save?); save or download the model again"
            ) from None
        raise WeMaskError(
            f"could not load model {spec!r} ({first_line(err)}); a hub id needs network access (or a filled HF cache): "
            "pass a local model directory or .gguf file, or omit --model for the embedded SmolLM2-135M-Instruct"
        ) from None
    if not hub.get("trust_remote_code"):
        warn_unused_code(spec or weights_from, model, tokenizer)
    return tokenizer, model


def warn_unused_code(spec: str, model, tokenizer) -> None:
    """One line when the model ships code (an auto_map) that transformers left unrun for its built-in classes."""
    files = [name for name, auto_map in (("config.json", getattr(model.config, "auto_map", None)),
                                         ("tokenizer_config.json", tokenizer.init_kwargs.get("auto_map"))) if auto_map]
    if files:
        progress.warn(
            f"--model {spec} ships its own Python code (an auto_map in its {' and '.join(files)}), which is not used: "
            f"loaded with transformers' built-in {type(model).__name__} and {type(tokenizer).__name__}; pass "
            "--trust-remote-code to run its code instead (only for sources you trust)"
        )


def load_tokenizer(source: str, hub: dict | None = None):
    """The tokenizer of a folder or hub id as every command uses it: BOS first where its metadata says so (models/bos.py),
    pad = eos when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, **(hub or {}))
    match_bos(tokenizer, declared_add_bos(source, (hub or {}).get("revision")), source)
    write_bos_in_chat_template(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def saved_run(source: str) -> SavedRun | None:
    """What a model directory carries (interventions.json, or a legacy wemask_config.json); None for a hub id."""
    from wemask_cli.interventions import load_saved

    return load_saved(source) if Path(source).is_dir() else None


def require_causal(model: torch.nn.Module, spec: str | None) -> None:
    """Refuse an encoder (BERT & co.): its attention modules say is_causal=False; a decoder's say True."""
    config = getattr(model, "config", None)
    flags = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    if getattr(config, "is_encoder_decoder", False) or (flags and not any(flags)):
        kind = getattr(config, "model_type", type(model).__name__)
        raise WeMaskError(
            f"--model {spec or 'default'} is not a causal (decoder-only) language model ({kind}): wemask generates and "
            "trains with decoders such as Llama, Qwen2/3, Mistral, Phi-3 and Gemma 2/3"
        )
