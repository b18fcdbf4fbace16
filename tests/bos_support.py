"""Tiny models whose tokenizers are meant to start every sequence with BOS, as a Gemma-3 GGUF under transformers 5.19
is: a Hugging Face folder whose tokenizer_config says `add_bos_token: true` over a tokenizer.json whose
post-processor adds nothing, and a GGUF file (written with gguf.GGUFWriter) with `tokenizer.ggml.add_bos_token`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import transformers
from conftest import CORPUS, TINY, make_tiny_model

BOS, EOS, START = "<bos>", "<|im_end|>", "<|im_start|>"
# a ChatML template that writes BOS itself, as Gemma's `{{ bos_token }}` does
BOS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_TEMPLATE = BOS_TEMPLATE.removeprefix("{{ bos_token }}")


def bos_backend():
    """A byte-level BPE `tokenizers.Tokenizer` with <|im_end|> (0), <|im_start|> (1), <bos> (2); no post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY["vocab_size"], special_tokens=[EOS, START, BOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def write_bos_folder(path: Path, template: str = BOS_TEMPLATE) -> Path:
    """A tiny Llama folder: tokenizer_config.json says add_bos_token, tokenizer.json's post-processor adds nothing."""
    path.mkdir(parents=True, exist_ok=True)
    backend = bos_backend()
    model = make_tiny_model("llama", vocab_size=backend.get_vocab_size(), bos_token_id=2, eos_token_id=0, pad_token_id=0)
    model.save_pretrained(path)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=EOS)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["add_bos_token"] = True
    config_file.write_text(json.dumps(config))
    saved = json.loads((path / "tokenizer.json").read_text())
    assert BOS not in json.dumps(saved["post_processor"]), "the folder must not add BOS through tokenizer.json"
    return path


def write_bos_gguf(path: Path, add_bos: bool | None = True, template: str = BOS_TEMPLATE) -> Path:
    """A tiny float32 llama GGUF with a byte-level ('gpt2') vocabulary whose BOS is <bos> (2); `add_bos` is
    `tokenizer.ggml.add_bos_token` (None: the key is absent)."""
    import gguf

    backend = bos_backend()
    state = json.loads(backend.to_str())["model"]
    tokens = [token for token, _ in sorted(state["vocab"].items(), key=lambda item: item[1])]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in state["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(TINY["max_position_embeddings"])
    writer.add_embedding_length(TINY["hidden_size"])
    writer.add_block_count(2)
    writer.add_feed_forward_length(TINY["intermediate_size"])
    writer.add_head_count(TINY["num_attention_heads"])
    writer.add_head_count_kv(TINY["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i < 3 else gguf.TokenType.NORMAL for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(0)
    writer.add_pad_token_id(0)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    writer.add_chat_template(template)
    for name, array in llama_tensors(len(tokens)).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def llama_tensors(vocab: int, layers: int = 2) -> dict[str, np.ndarray]:
    """Random float32 weights under llama.cpp's tensor names, in PyTorch's (out, in) shapes."""
    generator = torch.Generator().manual_seed(0)
    d, ffn = TINY["hidden_size"], TINY["intermediate_size"]
    kv = d // TINY["num_attention_heads"] * TINY["num_key_value_heads"]

    def weight(*shape):
        return (torch.randn(*shape, generator=generator) * 0.05).numpy()

    tensors = {"token_embd.weight": weight(vocab, d), "output_norm.weight": np.ones(d, np.float32),
               "output.weight": weight(vocab, d)}
    for layer in range(layers):
        shapes = {"attn_norm": None, "ffn_norm": None, "attn_q": (d, d), "attn_k": (kv, d), "attn_v": (kv, d),
                  "attn_output": (d, d), "ffn_gate": (ffn, d), "ffn_up": (ffn, d), "ffn_down": (d, ffn)}
        for name, shape in shapes.items():
            tensors[f"blk.{layer}.{name}.weight"] = np.ones(d, np.float32) if shape is None else weight(*shape)
    return tensors
