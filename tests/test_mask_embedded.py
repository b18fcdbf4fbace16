"""SPEC section 3 properties on the real embedded SmolLM2-135M-Instruct (massive activation, 30 layers)."""

from __future__ import annotations

import pytest
import torch

from wemask_cli import WeMaskConfig, apply_wemask
from wemask_cli.method.arch import resolve_layers

pytestmark = pytest.mark.embedded
# float32 on a model whose first token has norm ~2e4: padded/packed kernels differ from unpadded by ~1e-4
TOL = 3e-4
ME = 11  # the located ME layer of SmolLM2-135M-Instruct (tests/test_locate.py pins it)


def encode(tokenizer, *texts):
    tokenizer.padding_side = "left"
    return tokenizer(list(texts), return_tensors="pt", padding=True)


def test_identity_padding_packing_and_cache_on_the_embedded_model(embedded):
    model, tokenizer = embedded.model, embedded.tokenizer
    short, long = "The cat sat.", "Massive activations sit on the first token of every prompt."
    alone = encode(tokenizer, long)
    short_ids = encode(tokenizer, short)
    with torch.no_grad():
        plain = model(**alone).logits
        with apply_wemask(model, WeMaskConfig(mask_rate=0.0, me_layer=ME)):
            assert torch.equal(model(**alone).logits, plain)
        handle = apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=ME))
        masked = model(**alone).logits
        masked_short = model(**short_ids).logits
        assert (masked - plain).abs().max() > 1.0, "the mask must change the embedded model's logits"

        batch = encode(tokenizer, long, short)  # left-padded; TRL-style: no position ids
        out = model(**batch).logits
        pad = int((batch["attention_mask"][1] == 0).sum())
        torch.testing.assert_close(out[0], masked[0], atol=TOL, rtol=0)
        torch.testing.assert_close(out[1, pad:], masked_short[0], atol=TOL, rtol=0)

        ids = torch.cat([alone["input_ids"], short_ids["input_ids"]], 1)
        positions = torch.cat([torch.arange(alone["input_ids"].shape[1]), torch.arange(short_ids["input_ids"].shape[1])])
        packed = model(input_ids=ids, position_ids=positions[None], use_cache=False).logits[0]
        torch.testing.assert_close(packed[: alone["input_ids"].shape[1]], masked[0], atol=TOL, rtol=0)
        torch.testing.assert_close(packed[alone["input_ids"].shape[1] :], masked_short[0], atol=TOL, rtol=0)

    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    cached = model.generate(**batch, use_cache=True, **kwargs)
    uncached = model.generate(**batch, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    handle.remove()
    with torch.no_grad():
        assert torch.equal(model(**alone).logits, plain)


def test_weight_selection_on_the_embedded_model(embedded):
    handle = apply_wemask(embedded.model, WeMaskConfig(mask_rate=0.1, me_layer=ME))
    parts = resolve_layers(embedded.model)
    try:
        assert sorted(handle.config.dims) == list(range(ME, len(parts)))
        for layer, dims in handle.config.dims.items():
            assert len(dims) == 57  # floor(0.1 * 576)
            assert dims == torch.topk(parts[layer].attn_norm.weight.abs(), 57).indices.sort().values.tolist()
    finally:
        handle.remove()
