"""SPEC section 3 properties of the WeMask hook, on tiny random models of every supported architecture."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import make_tiny_model

from wemask_cli import WeMaskConfig, apply_wemask, remove_wemask
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.wemask_hook import first_token_positions, masked_layers

ME = 1
UNPACKED = ("gpt_oss",)  # its eager attention with sinks ignores packed position ids, unmasked too
IDS = torch.tensor([[5, 17, 42, 9, 33, 71, 8]])
OTHER = torch.tensor([[11, 12, 99, 4]])
# the SPEC section 3 properties hold for each way of choosing what the first token loses: dims, or the massive direction
MASKS = {"dims": {"mask_rate": 0.5}, "direction": {"mask_rate": 1.0, "select": "direction"}}


@pytest.fixture(params=sorted(MASKS))
def mask(request) -> dict:
    return MASKS[request.param]


def logits(model, **kwargs):
    with torch.no_grad():
        return model(**kwargs, use_cache=False).logits


def capture_attention_inputs(model, before_wemask=False):
    """Record each layer's attention input, after WeMask ran (hooks run in order) or before it (prepended)."""
    seen = {}
    handles = [
        part.attention.register_forward_pre_hook(
            lambda _m, _a, kw, i=part.index: seen.__setitem__(i, kw["hidden_states"].detach().clone()),
            with_kwargs=True,
            prepend=before_wemask,
        )
        for part in resolve_layers(model)
    ]
    return seen, handles


def test_rate_zero_is_bitwise_identity_and_remove_restores(family):
    arch = family
    model = make_tiny_model(arch)
    plain = logits(model, input_ids=IDS)
    with apply_wemask(model, WeMaskConfig(mask_rate=0.0, me_layer=ME)):
        assert torch.equal(logits(model, input_ids=IDS), plain)
    handle = apply_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=ME))
    assert not torch.allclose(logits(model, input_ids=IDS), plain)
    handle.remove()
    assert torch.equal(logits(model, input_ids=IDS), plain)


def test_rate_one_zeroes_only_the_first_tokens_attention_input(family):
    arch = family
    model = make_tiny_model(arch)
    apply_wemask(model, WeMaskConfig(mask_rate=1.0, me_layer=ME))
    before, _ = capture_attention_inputs(model, before_wemask=True)
    after, _ = capture_attention_inputs(model)
    model(input_ids=IDS, use_cache=False)
    assert sorted(after) == list(range(4))
    for layer in after:
        assert torch.equal(after[layer][0, 1:], before[layer][0, 1:]), f"layer {layer}: another token was edited"
        if layer >= ME:
            assert torch.count_nonzero(after[layer][0, 0]) == 0, f"layer {layer}: first token not zeroed"
            assert torch.count_nonzero(before[layer][0, 0]) > 0
        else:
            assert torch.equal(after[layer][0, 0], before[layer][0, 0]), f"layer {layer} below the ME layer changed"


@pytest.mark.parametrize("select", ["weight", "random", "activation"])
def test_selection_rules(select):
    model = make_tiny_model("gemma3_text")
    parts = resolve_layers(model)
    with torch.no_grad():
        for part in parts:  # make |w| and |1 + w| rank dims differently
            part.attn_norm.weight.copy_(torch.linspace(-1.9, 0.8, part.attn_norm.weight.numel()))
    handle = apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=2, select=select, seed=3))
    k = 16
    for layer in (2, 3):
        dims = handle.config.dims[layer]
        assert len(dims) == k
        if select == "weight":
            expected = torch.topk((1 + parts[layer].attn_norm.weight).abs(), k).indices.sort().values.tolist()
            assert dims == expected
            wrong = torch.topk(parts[layer].attn_norm.weight.abs(), k).indices.sort().values.tolist()
            assert dims != wrong
    if select == "random":
        again = apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=2, select="random", seed=3))
        assert again.config.dims == handle.config.dims
        other = apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=2, select="random", seed=4))
        assert other.config.dims != handle.config.dims


def padded_batch(side: str):
    """IDS and OTHER in one batch, padded on `side`, with generate-style position ids."""
    length = IDS.shape[1]
    pad = length - OTHER.shape[1]
    if side == "left":
        ids = torch.cat([IDS, torch.cat([torch.zeros(1, pad, dtype=torch.long), OTHER], 1)])
        mask = torch.cat([torch.ones(1, length), torch.cat([torch.zeros(1, pad), torch.ones(1, OTHER.shape[1])], 1)])
    else:
        ids = torch.cat([IDS, torch.cat([OTHER, torch.zeros(1, pad, dtype=torch.long)], 1)])
        mask = torch.cat([torch.ones(1, length), torch.cat([torch.ones(1, OTHER.shape[1]), torch.zeros(1, pad)], 1)])
    mask = mask.long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions, pad


def test_same_logits_alone_padded_and_packed(family, mask):
    arch = family
    model = make_tiny_model(arch)
    apply_wemask(model, WeMaskConfig(me_layer=ME, **mask))
    alone = logits(model, input_ids=IDS)[0]
    other = logits(model, input_ids=OTHER)[0]
    with torch.no_grad():
        unmasked_model = make_tiny_model(arch)
        assert not torch.allclose(logits(unmasked_model, input_ids=OTHER)[0], other, atol=1e-5)

    ids, mask, positions, pad = padded_batch("right")
    out = logits(model, input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(out[0], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1, : OTHER.shape[1]], other, atol=1e-5, rtol=0)

    ids, mask, positions, pad = padded_batch("left")
    for kwargs in ({"position_ids": positions}, {}):  # generate-style positions, and none (TRL DPO/GRPO passes)
        out = logits(model, input_ids=ids, attention_mask=mask, **kwargs)
        torch.testing.assert_close(out[0], alone, atol=1e-5, rtol=0)
        # without position ids the real tokens sit at positions pad.. (rotary attention is shift-invariant)
        torch.testing.assert_close(out[1, pad:], other, atol=1e-5, rtol=0)

    if arch in UNPACKED:  # transformers' own model mixes packed sequences (test_families checks that it still does)
        return
    packed = torch.cat([IDS, OTHER], 1)
    packed_positions = torch.cat([torch.arange(IDS.shape[1]), torch.arange(OTHER.shape[1])])[None]
    out = logits(model, input_ids=packed, position_ids=packed_positions)[0]
    torch.testing.assert_close(out[: IDS.shape[1]], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[IDS.shape[1] :], other, atol=1e-5, rtol=0)


def test_shifted_positions_alone_differ_from_unmasked_first_token():
    """The left-padded, no-position-ids case must mask the first real token, not the pad at index 0."""
    model = make_tiny_model("llama")
    apply_wemask(model, WeMaskConfig(mask_rate=1.0, me_layer=0))
    ids, mask, _, pad = padded_batch("left")
    seen, _ = capture_attention_inputs(model)
    model(input_ids=ids, attention_mask=mask, use_cache=False)
    for hidden in seen.values():
        assert torch.count_nonzero(hidden[1, pad]) == 0
        assert torch.count_nonzero(hidden[1, pad + 1]) > 0


def test_cached_generation_equals_uncached(family, mask):
    arch = family
    model = make_tiny_model(arch)
    apply_wemask(model, WeMaskConfig(me_layer=ME, **mask))
    ids, mask, _, pad = padded_batch("left")
    kwargs = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    cached = model.generate(ids, use_cache=True, **kwargs)
    uncached = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    single = model.generate(OTHER, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(cached[1, pad:], single[0])


def test_new_tokens_are_never_masked_during_decoding():
    model = make_tiny_model("llama")
    apply_wemask(model, WeMaskConfig(mask_rate=1.0, me_layer=0))
    seen_rows = []
    layer0 = resolve_layers(model)[0].attention
    layer0.register_forward_pre_hook(
        lambda _m, _a, kw: seen_rows.append(kw["hidden_states"].detach().clone()), with_kwargs=True
    )
    model.generate(IDS, max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None)
    prefill, *steps = seen_rows
    assert torch.count_nonzero(prefill[0, 0]) == 0
    assert steps and all(torch.count_nonzero(step[0, -1]) > 0 for step in steps)


def test_gradient_checkpointing_matches(arch):
    model = make_tiny_model(arch).train()
    labels = IDS.clone()

    def loss_and_grads():
        model.zero_grad()
        loss = model(input_ids=IDS, labels=labels, use_cache=False).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    apply_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=ME))
    loss, grads = loss_and_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loss_ckpt, grads_ckpt = loss_and_grads()
    torch.testing.assert_close(loss_ckpt, loss, atol=1e-6, rtol=0)
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], atol=1e-6, rtol=1e-5)
    norm = resolve_layers(model)[ME].attn_norm.weight
    dims = torch.tensor(apply_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=ME)).config.dims[ME])
    assert grads[[n for n, p in model.named_parameters() if p is norm][0]][dims].abs().sum() > 0


def test_bfloat16_and_peft():
    from peft import LoraConfig, get_peft_model

    model = make_tiny_model("qwen3").to(torch.bfloat16)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    plain = logits(peft_model, input_ids=IDS)
    handle = apply_wemask(peft_model, WeMaskConfig(mask_rate=1.0, me_layer=ME))
    seen, _ = capture_attention_inputs(peft_model)
    masked = logits(peft_model, input_ids=IDS)
    assert masked.dtype == torch.bfloat16 and not torch.equal(masked, plain)
    assert torch.count_nonzero(seen[ME][0, 0]) == 0
    handle.remove()
    assert torch.equal(logits(peft_model, input_ids=IDS), plain)


def test_reapply_replaces_and_remove_spares_foreign_hooks_and_deep_copies():
    model = make_tiny_model("llama")
    attention = resolve_layers(model)[2].attention
    foreign = attention.register_forward_pre_hook(lambda m, a: None)
    apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=1))
    apply_wemask(model, WeMaskConfig(mask_rate=0.6, me_layer=2))
    assert masked_layers(model) == [2, 3]
    twin = copy.deepcopy(model)
    assert masked_layers(twin) == [2, 3]
    assert remove_wemask(model) == 2 and remove_wemask(twin) == 2
    assert masked_layers(model) == [] and masked_layers(twin) == []
    calls = []
    foreign.remove()
    attention.register_forward_pre_hook(lambda m, a: calls.append(1))
    apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=1)).remove()
    logits(model, input_ids=IDS)
    assert calls == [1], "removing WeMask removed a hook it did not install"


def test_handle_removes_only_its_own_hooks():
    model = make_tiny_model("llama")
    first = apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=1))
    twin = copy.deepcopy(model)
    assert first.remove() == 3 and first.remove() == 0
    assert masked_layers(model) == [] and masked_layers(twin) == [1, 2, 3]


def test_layer_ranges():
    model = make_tiny_model("llama")
    cases = {"from-me": [1, 2, 3], "me-only": [1], "all": [0, 1, 2, 3], "1:3": [1, 2]}
    for layers, expected in cases.items():
        assert apply_wemask(model, WeMaskConfig(mask_rate=0.2, me_layer=1, layers=layers)).hooked_layers == expected
        assert masked_layers(model) == expected


def test_strength_scales_instead_of_zeroing():
    model = make_tiny_model("llama")
    handle = apply_wemask(model, WeMaskConfig(mask_rate=1.0, me_layer=0, layers="me-only", strength=0.25))
    before, _ = capture_attention_inputs(model, before_wemask=True)
    after, _ = capture_attention_inputs(model)
    model(input_ids=IDS, use_cache=False)
    torch.testing.assert_close(after[0][0, 0], before[0][0, 0] * 0.75)
    assert handle.config.strength == 0.25


def test_config_roundtrip_reapplies_recorded_dims(tmp_path):
    model = make_tiny_model("llama")
    handle = apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=1, mode="aware"))
    handle.config.save(tmp_path)
    loaded = WeMaskConfig.load(tmp_path)
    assert loaded == handle.config and loaded.dims[1] == handle.config.dims[1]
    expected = logits(model, input_ids=IDS)
    with torch.no_grad():  # the weights move (fine-tuning): recorded dims still win over a fresh top-k
        resolve_layers(model)[1].attn_norm.weight.mul_(torch.linspace(0.1, 3, 64))
    again = apply_wemask(model, loaded)
    assert again.config.dims == loaded.dims
    model2 = make_tiny_model("llama")
    apply_wemask(model2, loaded)
    torch.testing.assert_close(logits(model2, input_ids=IDS), expected)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mask_rate": 1.5, "me_layer": 1}, "mask_rate=1.5 is out of range: use a number in [0, 1]"),
        ({"mask_rate": -0.1, "me_layer": 1}, "mask_rate=-0.1"),
        ({"mask_rate": 0.3, "me_layer": 1, "strength": 2}, "strength=2 is out of range"),
        ({"mask_rate": 0.3, "me_layer": -1}, "me_layer=-1"),
        ({"mask_rate": 0.3, "me_layer": 1, "select": "magic"}, "select='magic' is unknown"),
        ({"mask_rate": 0.3, "me_layer": 1, "layers": "3:1"}, "layers='3:1'"),
        ({"mask_rate": 0.3, "me_layer": 1, "layers": "later"}, "layers='later' is not valid"),
        ({"mask_rate": 0.3, "me_layer": 1, "tokens": "every"}, "tokens='every' is unknown"),
        ({"mask_rate": 0.3}, "needs me_layer"),
    ],
)
def test_invalid_config_values_raise_value_error(kwargs, message):
    with pytest.raises(ValueError) as err:
        WeMaskConfig(**kwargs)
    assert message in str(err.value)


def test_layer_outside_model_is_a_value_error():
    model = make_tiny_model("llama")
    with pytest.raises(ValueError, match="me_layer=9 is outside the model: it has 4 layers, use 0..3"):
        apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=9))
    with pytest.raises(ValueError, match="unknown wemask config keys"):
        WeMaskConfig.from_dict({"mask_rate": 0.1, "rate": 2})


def test_first_token_positions_from_each_mask_form():
    # 2D mask as flash attention receives it during cached decoding: 3 cached keys + 1 new token
    mask2d = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    assert first_token_positions(mask2d, None, 2, 1).tolist() == [[False], [False]]
    assert first_token_positions(mask2d, None, 2, 4).tolist() == [[False, True, False, False], [True, False, False, False]]
    # no mask: position id 0
    assert first_token_positions(None, torch.tensor([[0, 1, 0, 1]]), 1, 4).tolist() == [[True, False, True, False]]
    # 4D float mask (eager): block-diagonal packed rows
    allowed = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    float_mask = torch.zeros(1, 1, 3, 3).masked_fill(~allowed, torch.finfo(torch.float32).min)
    assert first_token_positions(float_mask, None, 1, 3).tolist() == [[True, False, True]]


def test_unsupported_architecture_names_what_is_missing():
    import transformers

    from wemask_cli import WeMaskError

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=50))
    with pytest.raises(WeMaskError, match="cannot find decoder layers in GPT2LMHeadModel"):
        apply_wemask(gpt2, WeMaskConfig(mask_rate=0.3, me_layer=0))
    model = make_tiny_model("llama")
    del resolve_layers(model)[0].layer.input_layernorm
    with pytest.raises(WeMaskError, match="layer 0 has no norm whose weight selects WeMask's dims \\(input_layernorm\\), "
                       "which WeMask's --select weight needs; WeMask supports .*olmo2 \\(post-norm\\)"):
        apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=0))
    # only the feature that needs the norm refuses: random dims need none
    assert apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=0, select="random")).hooked_layers == [0, 1, 2, 3]


def test_gemma_adapter_uses_pre_feedforward_norm_and_one_plus_w():
    model = make_tiny_model("gemma2")
    part = resolve_layers(model)[0]
    assert part.ffn_norm is part.layer.pre_feedforward_layernorm
    assert part.post_ffn_norm is part.layer.post_feedforward_layernorm
    torch.testing.assert_close(part.attn_scale(), 1 + part.layer.input_layernorm.weight.float())
    llama = resolve_layers(make_tiny_model("llama"))[0]
    assert llama.ffn_norm is llama.layer.post_attention_layernorm and llama.post_ffn_norm is None
    phi3 = resolve_layers(make_tiny_model("phi3"))[0]
    assert set(phi3.ffn_projections()) == {"gate_up", "down"}


def test_inactive_config_needs_no_layer():
    handle = apply_wemask(make_tiny_model("llama"), WeMaskConfig(mask_rate=0.0))
    assert handle.hooked_layers == [] and handle.config.dims is None


def test_recorded_dims_survive_unchanged_settings_only():
    recorded = WeMaskConfig(mask_rate=0.3, me_layer=1, dims={1: [0, 1], 2: [3, 4]})
    assert recorded.with_updates(mask_rate=0.3, me_layer=1, strength=0.5).dims == recorded.dims
    for change in ({"mask_rate": 0.5}, {"me_layer": 2}, {"select": "random"}, {"layers": "all"}, {"seed": 1}):
        assert recorded.with_updates(**change).dims is None, change


# ---------------------------------------------------------------------------------------------------------------
# tokens="massive": every real token whose input norm exceeds MASSIVE_RATIO x the median of what it can see

MASSIVE_IDS = (42, 99)  # IDS[0, 2] and OTHER[0, 2]


def inject_massive(model, factor=1000.0):
    """Make the tokens MASSIVE_IDS carry a massive activation from the embedding on (the residual keeps it)."""

    def scale(module, args, output):
        chosen = torch.isin(args[0], torch.tensor(MASSIVE_IDS)).unsqueeze(-1)
        return output * torch.where(chosen, factor, 1.0).to(output.dtype)

    return model.get_input_embeddings().register_forward_hook(scale)


def test_massive_masks_the_first_and_every_massive_token(arch):
    model = make_tiny_model(arch)
    inject_massive(model)
    for tokens, zeroed in (("first", [0]), ("massive", [0, 2])):
        handle = apply_wemask(model, WeMaskConfig(mask_rate=1.0, me_layer=ME, tokens=tokens))
        after, hooks = capture_attention_inputs(model)
        model(input_ids=IDS, use_cache=False)
        for layer in range(ME, 4):
            nonzero = [int(torch.count_nonzero(after[layer][0, t]) > 0) for t in range(IDS.shape[1])]
            assert [t for t, n in enumerate(nonzero) if not n] == zeroed, (tokens, layer)
        handle.remove()
        for hook in hooks:
            hook.remove()


def test_massive_same_logits_alone_padded_and_packed(arch):
    model = make_tiny_model(arch)
    inject_massive(model)
    apply_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=ME, tokens="massive"))
    alone, other = logits(model, input_ids=IDS)[0], logits(model, input_ids=OTHER)[0]
    first_only = make_tiny_model(arch)
    inject_massive(first_only)
    apply_wemask(first_only, WeMaskConfig(mask_rate=0.5, me_layer=ME, tokens="first"))
    assert not torch.allclose(logits(first_only, input_ids=IDS)[0], alone, atol=1e-4)
    for side in ("right", "left"):
        ids, mask, positions, pad = padded_batch(side)
        for kwargs in ({"position_ids": positions}, {}):
            out = logits(model, input_ids=ids, attention_mask=mask, **kwargs)
            torch.testing.assert_close(out[0], alone, atol=1e-4, rtol=1e-4)
            real = slice(pad, None) if side == "left" else slice(0, OTHER.shape[1])
            torch.testing.assert_close(out[1, real], other, atol=1e-4, rtol=1e-4)
    if arch in UNPACKED:  # transformers' own model mixes packed sequences (test_families checks that it still does)
        return
    packed = torch.cat([IDS, OTHER], 1)
    packed_positions = torch.cat([torch.arange(IDS.shape[1]), torch.arange(OTHER.shape[1])])[None]
    out = logits(model, input_ids=packed, position_ids=packed_positions)[0]
    torch.testing.assert_close(out[: IDS.shape[1]], alone, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[IDS.shape[1] :], other, atol=1e-4, rtol=1e-4)


def test_massive_cached_generation_equals_uncached_and_new_tokens_are_never_masked(arch):
    model = make_tiny_model(arch)
    inject_massive(model)
    apply_wemask(model, WeMaskConfig(mask_rate=0.7, me_layer=ME, tokens="massive"))
    ids, mask, _, pad = padded_batch("left")
    kwargs = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    cached = model.generate(ids, use_cache=True, **kwargs)
    assert not torch.isin(cached[:, ids.shape[1] :], torch.tensor(MASSIVE_IDS)).any(), "pick other massive ids"
    assert torch.equal(cached, model.generate(ids, use_cache=False, **kwargs))
    rows = []
    resolve_layers(model)[ME].attention.register_forward_pre_hook(
        lambda _m, _a, kw: rows.append(kw["hidden_states"].detach().clone()), with_kwargs=True
    )
    model.generate(IDS, max_new_tokens=3, do_sample=False, pad_token_id=0, eos_token_id=None)
    prefill, *steps = rows
    assert steps and all(torch.count_nonzero(step[0, -1]) > 0 for step in steps)


def test_massive_is_exact_under_gradient_checkpointing():
    for arch in ("llama", "gemma3_text"):
        model = make_tiny_model(arch).train()
        inject_massive(model, factor=50.0)
        apply_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=ME, tokens="massive"))
        grads = []
        for checkpointing in (False, True):
            if checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.zero_grad()
            model(input_ids=IDS, labels=IDS, use_cache=False).loss.backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        for name in grads[0]:
            torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_massive_token_positions_from_each_mask_form():
    from wemask_cli.method.tokens import MASSIVE_RATIO, massive_token_positions

    norms = torch.tensor([100.0, 1.0, 1.1, 50.0, 0.9, 1.0])
    hidden = torch.zeros(1, 6, 4)
    hidden[0, :, 0] = norms
    expected = [True, False, False, True, False, False]
    assert massive_token_positions(hidden, None, torch.arange(6)[None]).tolist() == [expected]
    # left padding (2D mask as flash attention gets it): the pads' norms never count, the first real token is 2
    padded = torch.cat([torch.full((1, 2, 4), 1e4), hidden], 1)
    mask2d = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    assert massive_token_positions(padded, mask2d, None).tolist() == [[False, False, *expected]]
    # packed rows restart at position 0: each sequence's tokens are judged against their own sequence only
    packed = torch.cat([hidden, hidden * 30], 1)
    positions = torch.cat([torch.arange(6), torch.arange(6)])[None]
    assert massive_token_positions(packed, None, positions).tolist() == [expected + expected]
    # 4D additive mask, block diagonal (packed), same answer
    allowed = torch.block_diag(torch.ones(6, 6), torch.ones(6, 6)).tril().bool()
    mask4d = torch.zeros(1, 1, 12, 12).masked_fill(~allowed, torch.finfo(torch.float32).min)
    assert massive_token_positions(packed, mask4d, None).tolist() == [expected + expected]
    # the threshold: token 3 against the median of tokens 1..3 (1.1; token 0 is excluded); later tokens never count
    for factor, chosen in ((0.99, False), (1.01, True)):
        hidden[0, 3, 0] = MASSIVE_RATIO * 1.1 * factor
        hidden[0, 4:, 0] = 1e3
        assert massive_token_positions(hidden, None, torch.arange(6)[None])[0, 3].item() is chosen
