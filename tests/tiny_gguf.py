"""A tiny GGUF file written with the `gguf` package: a Llama of conftest's tiny shape in float32, its byte-level BPE
tokenizer as a "gpt2" GGUF tokenizer, no output.weight (so the converted model ties lm_head to the embeddings)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

LAYER_TENSORS = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def llama_cpp_rotary(weight: np.ndarray, heads: int) -> np.ndarray:
    """A q/k projection in llama.cpp's rotary layout (transformers undoes it when loading a GGUF)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_tensor(key: str, tensor: np.ndarray, config) -> tuple[str, np.ndarray]:
    if key == "model.embed_tokens.weight":
        return "token_embd.weight", tensor
    if key == "model.norm.weight":
        return "output_norm.weight", tensor
    _, _, layer, *rest = key.split(".")
    part = ".".join(rest[:-1])
    heads = {"self_attn.q_proj": config.num_attention_heads, "self_attn.k_proj": config.num_key_value_heads}.get(part)
    return f"blk.{layer}.{LAYER_TENSORS[part]}.weight", llama_cpp_rotary(tensor, heads) if heads else tensor


def write_tiny_gguf(path: Path, model, tokenizer) -> Path:
    """`model` (a Llama) and `tokenizer` (byte-level BPE) as a float32 GGUF file at `path`."""
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(tokenizer))
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([3 if token.startswith("<|") else 1 for token, _ in vocab])  # 3: control, 1: normal
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    for key, tensor in model.state_dict().items():
        if key != "lm_head.weight":
            name, data = gguf_tensor(key, tensor.float().numpy(), config)
            writer.add_tensor(name, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
