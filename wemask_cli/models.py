"""load_model(): one way for every command to load a model and its tokenizer.

`--model` is a hub id, a local Hugging Face directory (a full model or a LoRA adapter), a `.gguf` file, or
nothing / 'default' for the embedded SmolLM2-135M-Instruct. GGUF files are dequantized once into a plain
model under the cache directory, so later loads take a second or two.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError

from . import progress
from .bos import declared_add_bos, match_bos, write_bos_in_chat_template
from .cache import cache_dir  # noqa: F401  (re-exported: `from wemask_cli.models import cache_dir`)
from .errors import WeMaskError, first_line
from .finite import require_finite_file, require_finite_model
from .gguf_cache import converted_gguf_dir, embedded_model_dir
from .method.config import WeMaskConfig
from .outputs import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, MODEL_CONFIG_FILE, RUN_RECORD_FILE

if TYPE_CHECKING:
    from .interventions import Installation
    from .interventions.saved import SavedRun

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BNB_CPU_SINCE = "0.49"  # the first bitsandbytes with a CPU back-end for 4-bit and 8-bit
# what loading a model raises for missing or bad files: files, hub and network (OSError and huggingface_hub's errors),
# a bad config.json or unknown model type (ValueError), a malformed tokenizer.json (KeyError), corrupt weights
LOAD_ERRORS = (OSError, ValueError, KeyError, SafetensorError)
RECORDED = "recorded"  # load_model(quantization=RECORDED): the base quantized as the training run recorded it
BASE_QUANTIZATIONS = (RECORDED, "none", "4bit", "8bit")  # what --base-quantization accepts


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


def quantization_config(quantization: str | None, quant_type: str = "nf4", nested: bool = True):
    """A bitsandbytes config for '4bit' (`quant_type` nf4 or fp4, `nested`: double quantization) / '8bit', or None;
    refused only where bitsandbytes cannot run."""
    if quantization is None:
        return None
    if quantization not in ("4bit", "8bit"):
        raise WeMaskError(f"quantization {quantization!r} is not valid: use 4bit or 8bit")
    require_bitsandbytes(quantization)
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if torch.cuda.is_available() else torch.float32  # bf16 matmuls are slow on the CPU
    if quant_type not in ("nf4", "fp4"):
        raise WeMaskError(f"--bnb-4bit-quant-type {quant_type!r} is not valid: use nf4 or fp4")
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=nested
    )


def require_bitsandbytes(quantization: str) -> None:
    """bitsandbytes runs on CUDA, and on the CPU from 0.49 on: anything else is one line saying why."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        found = version("bitsandbytes")
    except PackageNotFoundError:
        raise WeMaskError(f"--load-in-{quantization} needs bitsandbytes: pip install 'bitsandbytes>=0.49'") from None
    if not torch.cuda.is_available() and Version(found) < Version(BNB_CPU_SINCE):
        raise WeMaskError(
            f"--load-in-{quantization}: bitsandbytes {found} runs only on CUDA and no GPU is visible here; its CPU "
            f"back-end needs bitsandbytes >= {BNB_CPU_SINCE} (pip install -U bitsandbytes), or drop the flag"
        )


def quantized_device_map() -> dict:
    """Where bitsandbytes puts the whole model: this process's GPU, else the CPU."""
    return {"": torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}


def resolve_source(spec: str | None) -> str:
    """Turn --model into a directory or hub id: default -> embedded dir, .gguf -> converted dir."""
    if spec in (None, "", "default"):
        return str(embedded_model_dir())
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise WeMaskError(f"--model {spec}: no such GGUF file; give an existing .gguf path, a model directory or a hub id")
        return str(converted_gguf_dir(path))
    if path.exists():
        if not path.is_dir():
            raise WeMaskError(f"--model {spec} is a file, not a model directory: give a directory, a .gguf file or a hub id")
        if not ((path / MODEL_CONFIG_FILE).is_file() or (path / ADAPTER_CONFIG_FILE).is_file()):
            raise WeMaskError(
                f"--model {spec} has no config.json or adapter_config.json: it is not a Hugging Face model directory"
            )
        return str(path)
    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or os.sep + os.sep in spec
    if looks_like_path:
        raise WeMaskError(f"--model {spec}: no such directory; give an existing model directory, a .gguf file or a hub id")
    from .hub import before_hub_fetch

    before_hub_fetch(f"--model {spec}")
    return spec


def model_inputs(spec: str | None) -> list[tuple[str, str]]:
    """(flag, local path) of what --model reads, which no output may replace: its folder or .gguf file, a LoRA
    adapter's base folder, and wemask's cache (the embedded model, converted .gguf files, the locate cache)."""
    found = [("--model", spec)] if spec not in (None, "", "default") else []
    adapter = Path(spec).expanduser() / ADAPTER_CONFIG_FILE if found else None
    if adapter is not None and adapter.is_file():
        try:
            base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            base = None  # load_model names the problem
        found += [("the base model of --model", base)] if isinstance(base, str) else []
    return [*found, ("wemask's cache", str(cache_dir()))]


def hidden_size(spec: str | None) -> int | None:
    """The hidden size a local model (or a LoRA adapter's base) states in its config, read without its weights;
    None for a hub id or a config that does not say."""
    source = resolve_source(spec)
    adapter = Path(source) / ADAPTER_CONFIG_FILE
    if adapter.is_file():
        source = resolve_source(json.loads(adapter.read_text()).get("base_model_name_or_path") or source)
    if not (Path(source) / MODEL_CONFIG_FILE).is_file():
        return None
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError):  # load_model names the problem (code it ships runs only there, with the flag)
        return None
    return getattr(config.get_text_config(), "hidden_size", None)


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

            from .compat.bitsandbytes import four_bit_kernel_line

            progress.say(four_bit_kernel_line())
    return hub, kwargs


def recorded_quantization(source: str) -> tuple[str | None, dict]:
    """(4bit | 8bit | None, its bitsandbytes settings as load_model's `pretrained`): how the training run saved in
    `source` loaded its base (its wemask_run.json options); (None, {}) for anything else."""
    try:
        options = json.loads((Path(source) / RUN_RECORD_FILE).read_text()).get("options") or {}
    except (OSError, ValueError, AttributeError):  # no record (a plain model, a hub id) or not a run's
        return None, {}
    if options.get("load_in_8bit"):
        return "8bit", {}
    if not options.get("load_in_4bit"):
        return None, {}
    return "4bit", {"quant_type": options.get("bnb_4bit_quant_type"), "nested": options.get("use_bnb_nested_quant")}


def base_quantization(source: str, asked: str | None, pretrained: dict | None) -> tuple[str | None, dict | None]:
    """(quantization, pretrained) for load_model: `asked` as given, 'none' as None, RECORDED as the run in `source`
    recorded it, said in one line that names the flag to change it."""
    if asked not in BASE_QUANTIZATIONS and asked is not None:
        raise WeMaskError(f"--base-quantization {asked!r} is not valid: use {', '.join(BASE_QUANTIZATIONS)}")
    if asked != RECORDED:
        return (None if asked == "none" else asked), pretrained
    quantization, settings = recorded_quantization(source)
    if quantization is None:
        return None, pretrained
    article = {"4bit": "a 4-bit", "8bit": "an 8-bit"}[quantization]
    try:
        require_bitsandbytes(quantization)
    except WeMaskError as err:
        raise WeMaskError(f"{source} trained on {article} base ({err}); or pass --base-quantization none to load the base "
                          "unquantized (its outputs then differ from training's)") from None
    detail = f" ({settings['quant_type'] or 'nf4'}{', nested' if settings['nested'] is not False else ''})" if settings else ""
    progress.say(f"{source} trained on {article}{detail} base (wemask_run.json): loading the base so "
                 "(--base-quantization none loads it unquantized)")
    return quantization, {**settings, **(pretrained or {})}


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
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source)
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
    return loaded


def load_tokenizer_and_model(spec: str | None, tokenizer_from: str, weights_from: str, hub: dict, kwargs: dict):
    """(tokenizer, model) by transformers; missing or bad files, or no network: one line (other errors are bugs)."""
    from transformers import AutoModelForCausalLM

    try:
        return load_tokenizer(tokenizer_from, hub), AutoModelForCausalLM.from_pretrained(weights_from, **kwargs)
    except (*LOAD_ERRORS, RuntimeError) as err:
        if isinstance(err, RuntimeError) and "ignore_mismatched_sizes" not in str(err):
            raise  # of RuntimeErrors only transformers' "the weights do not fit config.json" is the user's files
        if isinstance(err, ValueError) and "trust_remote_code" in str(err) and not hub.get("trust_remote_code"):
            raise WeMaskError(
                f"--model {spec or weights_from} ships its own Python code (an auto_map in its config.json), which wemask "
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


def load_tokenizer(source: str, hub: dict | None = None):
    """The tokenizer of a folder or hub id as every command uses it: BOS first where its metadata says so (bos.py),
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
    from .interventions import load_saved

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
