"""Shared fixtures: tiny random models of every supported architecture, a tiny tokenizer, the embedded model."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import transformers
from ci_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (hooks: CI=true refuses skips)

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=300,
    max_position_embeddings=256,
)

ARCH_CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**TINY),
    "mistral": lambda: transformers.MistralConfig(**TINY, sliding_window=None),
    "qwen2": lambda: transformers.Qwen2Config(**TINY),
    "qwen3": lambda: transformers.Qwen3Config(**TINY, head_dim=16),
    "phi3": lambda: transformers.Phi3Config(**TINY, pad_token_id=0),
    "gemma2": lambda: transformers.Gemma2Config(**TINY, head_dim=16, sliding_window=8),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(**TINY, head_dim=16, sliding_window=8),
}

MOE = dict(num_experts_per_tok=2)
IDS_IN_VOCAB = dict(bos_token_id=1, eos_token_id=0, pad_token_id=0)  # some families' defaults lie outside 300 tokens
# Families beyond ARCH_CONFIGS: the MoE decoders, post-norm OLMo-2, parallel Cohere 2 and Granite. They run
# through the shared spec's properties (tests/test_families.py and the `family` fixture), not every arch test.
FAMILY_CONFIGS = {
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(
        **TINY, **MOE, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=64
    ),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**TINY, **MOE, num_experts=4, moe_intermediate_size=32, head_dim=16),
    "mixtral": lambda: transformers.MixtralConfig(**TINY, **MOE, num_local_experts=4),
    "gpt_oss": lambda: transformers.GptOssConfig(**TINY, **MOE, num_local_experts=4, head_dim=16, sliding_window=8),
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        **{**TINY, "num_key_value_heads": 4}, **MOE, n_routed_experts=4, moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
        n_group=1, topk_group=1, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
        v_head_dim=16,
    ),  # fmt: skip
    "olmo2": lambda: transformers.Olmo2Config(**TINY, **IDS_IN_VOCAB),
    "cohere2": lambda: transformers.Cohere2Config(**TINY, **IDS_IN_VOCAB, sliding_window=8),
    "granite": lambda: transformers.GraniteConfig(**TINY),
}
MOE_FAMILIES = ("deepseek_v3", "gpt_oss", "mixtral", "qwen2_moe", "qwen3_moe")

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. What is 12 plus 30? The answer is 42.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "def add(a, b):\n    return a + b\n# #### 72 \\boxed{3} user assistant system",
    "I'm sorry, but I can't help with that. Sure! Here is how to do it step by step.",
]


def make_tiny_model(arch: str = "llama", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    config = {**ARCH_CONFIGS, **FAMILY_CONFIGS}[arch]()
    for key, value in overrides.items():
        setattr(config, key, value)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def make_tiny_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of under 300 tokens with a ChatML template; pad = eos = <|im_end|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|im_end|>", "<|im_start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|im_end|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(params=sorted(ARCH_CONFIGS))
def arch(request) -> str:
    return request.param


@pytest.fixture(params=sorted(ARCH_CONFIGS) + sorted(FAMILY_CONFIGS))
def family(request) -> str:
    """Every family the adapter supports: for the shared spec's properties (SPEC section 3)."""
    return request.param


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer) -> str:
    """A tiny Llama saved with its tokenizer: what the CLI and the trainers load by path."""
    path = tmp_path_factory.mktemp("tiny-llama")
    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    model.config.pad_token_id = tiny_tokenizer.pad_token_id
    model.config.eos_token_id = tiny_tokenizer.eos_token_id
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory, tiny_tokenizer) -> str:
    """A tiny Llama as a float32 .gguf file (tests/tiny_gguf.py), for the GGUF conversion cache."""
    from tiny_gguf import write_tiny_gguf

    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    return str(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf", model, tiny_tokenizer))


@pytest.fixture(scope="session")
def embedded_dir() -> str:
    """The converted embedded SmolLM2-135M-Instruct (converted once into the user cache)."""
    from wemask_cli.models.gguf_cache import embedded_model_dir

    return str(embedded_model_dir())


@pytest.fixture(scope="session")
def embedded(embedded_dir):
    from wemask_cli.models.loading import load_model

    return load_model(embedded_dir, dtype="float32")


def run_main(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run `wemask ARGS` in-process through the real entry point: (exit code, stdout, stderr)."""
    import sys

    from wemask_cli.cli import main

    monkeypatch.setattr(sys, "argv", ["wemask", *args])
    code = 0
    try:
        main()
    except SystemExit as exit_info:
        code = exit_info.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler for the test, whatever the process inherited (`nohup make test &` starts it with
    SIGINT ignored); the inherited one is restored after."""
    import signal

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


@pytest.fixture(scope="session")
def trl_flags_known():
    """TRL's flag spellings in the cache folder, as any earlier training command of these releases leaves them."""
    from wemask_cli.train.trl_flags import trl_flags

    trl_flags.cache_clear()  # read (and written) here: a test under another $WEMASK_CACHE may have left them in memory only
    return {config: trl_flags(f"trl:{config}") for config in ("SFTConfig", "DPOConfig", "GRPOConfig")}


def pytest_collection_modifyitems(items):
    """Every test that calls tests/vllm_support.py's require_vllm (or whose module imports it) needs vLLM: mark it `vllm`, so that `make test` runs it
    in the "vllm" environment (and leaves it out of "current", which has no vLLM). The documentation tests are
    `docs`: the site is built once, in "current"."""
    for item in items:
        code = getattr(getattr(item, "function", None), "__code__", None)
        calls_it = code is not None and "require_vllm" in (*code.co_names, *code.co_varnames)  # imported in the test
        if calls_it or getattr(item.module, "require_vllm", None) is not None:
            item.add_marker(pytest.mark.vllm)
        if item.path.name == "test_docs.py":
            item.add_marker(pytest.mark.docs)


@pytest.fixture
def weightless_model_dir(tmp_path) -> str:
    """A model folder with a config.json and no weights: what needs no model passes the early checks, and any load
    fails, so a refusal that names something else came before the model loads."""
    folder = tmp_path / "weightless-model"
    folder.mkdir()
    transformers.LlamaConfig(**TINY).save_pretrained(folder)
    return str(folder)
