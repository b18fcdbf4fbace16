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


def masked_config(embedded, select: str) -> WeMaskConfig:
    """r = 0.3 of the dims, or the massive direction (estimated on the locate prompts, as the CLI does)."""
    if select == "weight":
        return WeMaskConfig(mask_rate=0.3, me_layer=ME)
    from wemask_cli.mask_request.flags import with_direction

    (config,) = with_direction([WeMaskConfig(mask_rate=1.0, me_layer=ME, select="direction")], embedded)
    return config


@pytest.mark.parametrize("select", ["weight", "direction"])
def test_identity_padding_packing_and_cache_on_the_embedded_model(embedded, select):
    model, tokenizer = embedded.model, embedded.tokenizer
    short, long = "The cat sat.", "Massive activations sit on the first token of every prompt."
    alone = encode(tokenizer, long)
    short_ids = encode(tokenizer, short)
    with torch.no_grad():
        plain = model(**alone).logits
        with apply_wemask(model, WeMaskConfig(mask_rate=0.0, me_layer=ME)):
            assert torch.equal(model(**alone).logits, plain)
        handle = apply_wemask(model, masked_config(embedded, select))
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


def test_massive_direction_on_the_embedded_model(embedded):
    """The first token points one way across the locate prompts from the ME layer on, and alpha = 1 removes its
    component there (what is left is orthogonal to v), the other tokens untouched."""
    config = masked_config(embedded, "direction")
    assert config.direction["prompts"] == 4 and sorted(config.vectors) == list(range(ME, 30))
    assert min(config.direction["cosines"].values()) > 0.9
    parts = resolve_layers(embedded.model)
    seen = {}
    ids = encode(embedded.tokenizer, "Massive activations sit on the first token.")
    with apply_wemask(embedded.model, config):
        hooks = [parts[l].attention.register_forward_pre_hook(
            lambda _m, _a, kw, l=l: seen.__setitem__(l, kw["hidden_states"][0].detach().clone()), with_kwargs=True)
            for l in (ME, 20)]
        with torch.no_grad():
            embedded.model(**ids)
        for hook in hooks:
            hook.remove()
    for l in (ME, 20):
        first, rest = seen[l][0], seen[l][1:]
        assert abs(float(first @ config.vectors[l])) < 1e-3 * float(first.norm() + 1)
        assert (rest @ config.vectors[l]).abs().max() > 1e-3  # other tokens keep their component
