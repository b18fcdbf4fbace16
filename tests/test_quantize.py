"""Simulated quantization (wemask_cli/eval/quantize.py): hand-computed grids, axes, restore, SmoothQuant."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model
from torch import nn

from wemask_cli.eval.quantize import (
    parse_schemes,
    quantize_fp4,
    quantize_int,
    round_to_e2m1,
    round_to_int_grid,
    simulate,
    smoothing_factors,
    target_linears,
)
from wemask_cli.runtime.errors import WeMaskError

# ------------------------------------------------------------------------------------------ INT grids


def test_int8_rounds_to_the_row_scale():
    # max 127/128 -> scale exactly 1/128: x·128 = 38.4 -> 38, -0.5 -> 0 (half to even), 2.5 -> 2, 1.5 -> 2
    row = torch.tensor([[127 / 128, 38.4 / 128, -0.5 / 128, 2.5 / 128, 1.5 / 128, -127 / 128]])
    expected = torch.tensor([[127, 38, 0, 2, 2, -127]]) / 128
    assert torch.equal(quantize_int(row, 8), expected)


def test_int4_rounds_with_qmax_7_and_never_uses_minus_8():
    row = torch.tensor([[-7.0, 3.4, -2.5, 1.5, 0.49, 6.6]])  # max 7 -> scale 1
    assert torch.equal(quantize_int(row, 4), torch.tensor([[-7.0, 3.0, -2.0, 2.0, 0.0, 7.0]]))
    # scale 1.75 / 7 = 0.25: 0.125 -> 0.5 -> 0; -0.375 -> -1.5 -> -2 -> -0.5; 0.8 -> 3.2 -> 3 -> 0.75
    out = quantize_int(torch.tensor([[1.75, 0.125, -0.375, 0.8]]), 4)
    assert torch.equal(out, torch.tensor([[1.75, 0.0, -0.5, 0.75]]))


def test_int_grid_clips_to_plus_minus_qmax():
    x = torch.tensor([300.0, -300.0, 1.0, -8.0])
    assert torch.equal(round_to_int_grid(x, torch.tensor(1.0), 127), torch.tensor([127.0, -127.0, 1.0, -8.0]))
    assert torch.equal(round_to_int_grid(x, torch.tensor(1.0), 7), torch.tensor([7.0, -7.0, 1.0, -7.0]))


def test_zero_rows_stay_zero_without_nan():
    x = torch.zeros(3, 32)
    x[1, 4] = 2.0
    for out in (quantize_int(x, 8), quantize_int(x, 4), quantize_fp4(x, 16)):
        assert torch.isfinite(out).all() and torch.allclose(out, x)


def test_weights_per_output_channel_and_inputs_per_token():
    # weights: one scale per row (output channel), so the outlier in row 0 leaves row 1 exact
    w = torch.tensor([[1.0, 100.0], [1.0, 1.0]])
    assert torch.allclose(quantize_int(w, 4), torch.tensor([[0.0, 100.0], [1.0, 1.0]]))
    # inputs (batch, tokens, features): one scale per token, the outlier token leaves the others exact
    x = torch.tensor([[[7.0, -3.0, 2.0], [700.0, 1.0, 2.0]], [[1.0, 5.0, -7.0], [6.0, 0.0, 7.0]]])
    out = quantize_int(x, 4)
    assert torch.equal(out[0, 0], x[0, 0]) and torch.equal(out[1], x[1])
    assert torch.equal(out[0, 1], torch.tensor([700.0, 0.0, 0.0]))


# ------------------------------------------------------------------------------------------ FP4


def test_e2m1_snaps_to_the_nearest_value_ties_to_even_mantissa():
    values = [0.2, 0.25, 0.3, 0.7, 0.75, 1.2, 1.25, 1.8, 2.4, 2.5, 2.6, 3.4, 3.5, 4.9, 5.0, 5.1, 7.0, -0.8, -5.5]
    snapped = [0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0, 6.0, 6.0, -1.0, -6.0]
    assert round_to_e2m1(torch.tensor(values)).tolist() == snapped
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    assert torch.equal(round_to_e2m1(grid), grid) and torch.equal(round_to_e2m1(-grid), -grid)


def test_fp4_block_scales_16_against_32():
    grid16 = torch.tensor([6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 0.0] * 2)
    x = torch.cat([grid16, grid16 / 8])  # second block: max 0.75 -> scale exactly 1/8
    assert torch.equal(quantize_fp4(x, 16), x)  # each block on its own grid
    # one block of 32: scale 1, the small half snaps to {0, 0.5, 1}: 0.75 -> 1, 0.25 -> 0 (ties to even)
    small = [0.75, 0.0625, 0.125, 0.1875, 0.25, 0.375, 0.5, 0.0] * 2
    expected_small = [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0] * 2
    assert quantize_fp4(x, 32)[16:].tolist() == expected_small
    assert (grid16 / 8).tolist() == small


def test_fp4_blocks_run_along_the_input_dimension_per_row():
    w = torch.zeros(2, 20)  # 20 = a block of 16 and a shorter block of 4
    w[0, :16] = 12.0 * torch.linspace(0, 1, 16)  # block max 12 -> scale 2
    w[0, 16:] = torch.tensor([0.3, 0.2, 0.1, 0.15])  # own scale 0.05: 6, 4, 2, 3 exactly on the grid
    w[1, 3] = 0.75
    out = quantize_fp4(w, 16)
    assert torch.allclose(out[0, 16:], w[0, 16:], atol=1e-7)
    assert torch.equal(out[1], w[1])
    assert torch.equal(out[0, :16], round_to_e2m1(w[0, :16] / 2) * 2)


# ------------------------------------------------------------------------------------------ on a model


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.fixture(scope="module")
def tiny():
    return make_tiny_model("llama", seed=3)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))


def test_error_shrinks_with_more_bits(tiny, ids):
    plain = logits(tiny, ids)
    errors = {}
    for scheme in ("w8a8", "w4a8", "w4a4", "fp4"):
        with simulate(tiny, scheme):
            errors[scheme] = (logits(tiny, ids) - plain).pow(2).mean().item()
    assert 0 < errors["w8a8"] < errors["w4a8"] < errors["w4a4"]
    assert errors["w8a8"] < errors["fp4"]


def test_restore_is_bitwise_and_hooks_are_gone(tiny, ids):
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    plain = logits(tiny, ids)
    with simulate(tiny, "w4a4", smoothquant=0.5, calibration=[ids]):
        assert not torch.equal(logits(tiny, ids), plain)
    with pytest.raises(RuntimeError), simulate(tiny, "fp4", block_size=32):
        raise RuntimeError("interrupted")
    assert all(torch.equal(v, before[k]) for k, v in tiny.state_dict().items())
    assert torch.equal(logits(tiny, ids), plain)


def test_targets_decoder_linears_only(tiny):
    names = [name for name, _ in target_linears(tiny)]
    assert len(names) == 4 * 7 and "layers.0.self_attn.q_proj" in names and "layers.3.mlp.down_proj" in names
    embed, head = tiny.get_input_embeddings().weight.clone(), tiny.lm_head.weight.clone()
    up = tiny.model.layers[0].mlp.up_proj.weight
    original = up.detach().clone()
    with simulate(tiny, "w4a4"):
        assert torch.equal(tiny.get_input_embeddings().weight, embed) and torch.equal(tiny.lm_head.weight, head)
        assert torch.equal(up, quantize_int(original, 4))


def test_lora_adapters_stay_in_full_precision_their_base_is_quantized():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_tiny_model("llama", seed=4), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    names = [name for name, _ in target_linears(model)]
    assert "layers.0.self_attn.q_proj.base_layer" in names and len(names) == 4 * 7
    assert not any("lora_" in name for name in names)


def test_none_changes_nothing(tiny, ids):
    plain = logits(tiny, ids)
    with simulate(tiny, "none"):
        assert torch.equal(logits(tiny, ids), plain)


# ------------------------------------------------------------------------------------------ SmoothQuant


class OneLinear(nn.Module):
    """A 'decoder' of one linear: forward(input_ids=X) returns the linear's output (enough for simulate)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([nn.ModuleDict({"proj": nn.Linear(weight.shape[1], weight.shape[0], bias=False)})])
        self.model.layers[0]["proj"].weight.data.copy_(weight)

    def forward(self, input_ids, use_cache=False):
        return self.model.layers[0]["proj"](input_ids)


def test_smoothing_factor_matches_the_formula():
    toy = OneLinear(torch.tensor([[1.0, 4.0], [-0.5, 2.0]]))  # column max |W| = [1, 4]
    x = torch.tensor([[[4.0, 1.0], [-2.0, 0.5]]])  # channel max |X| = [4, 1]
    s = smoothing_factors(toy, target_linears(toy), 0.5, [x])["layers.0.proj"]
    assert torch.allclose(s, torch.tensor([2.0, 0.5]))  # sqrt(4)/sqrt(1), sqrt(1)/sqrt(4)
    s = smoothing_factors(toy, target_linears(toy), 1.0, [x])["layers.0.proj"]
    assert torch.allclose(s, torch.tensor([4.0, 1.0]))


def test_smoothquant_keeps_the_unquantized_output(tiny, ids):
    plain = logits(tiny, ids)
    q_proj = tiny.model.layers[1].self_attn.q_proj.weight
    original = q_proj.detach().clone()
    with simulate(tiny, "none", smoothquant=0.5, calibration=[ids]):
        assert not torch.equal(q_proj, original)  # W·s really is in place
        assert torch.allclose(logits(tiny, ids), plain, atol=1e-4, rtol=1e-4)
    assert torch.equal(q_proj, original)


def test_smoothquant_shares_one_factor_per_input(tiny, ids):
    factors = smoothing_factors(tiny, target_linears(tiny), 0.5, [ids])
    attn = "layers.2.self_attn."
    assert factors[attn + "q_proj"] is factors[attn + "k_proj"] is factors[attn + "v_proj"]
    assert factors["layers.2.mlp.gate_proj"] is factors["layers.2.mlp.up_proj"]
    assert factors[attn + "o_proj"] is not factors[attn + "v_proj"]
    assert factors["layers.2.mlp.down_proj"] is not factors["layers.2.mlp.up_proj"]


def test_smoothquant_lowers_the_error_on_an_outlier_channel():
    torch.manual_seed(0)
    toy = OneLinear(torch.randn(32, 64) / 8)
    x = torch.randn(4, 16, 64)
    x[..., 5] *= 100.0  # one input channel carries outliers on every token
    plain = toy(x).detach()
    errors = []
    for alpha in (None, 0.5):
        with torch.no_grad(), simulate(toy, "w8a8", smoothquant=alpha, calibration=[x]):
            errors.append((toy(x) - plain).pow(2).mean().item())
    assert errors[1] < errors[0] / 4


# ------------------------------------------------------------------------------------------ bad input


def test_bad_schemes_and_flags_say_one_line():
    assert parse_schemes("none, W8A8,fp4,w8a8") == ["none", "w8a8", "fp4"]
    with pytest.raises(WeMaskError, match="unknown quantization scheme 'int3'"):
        parse_schemes("w8a8,int3")
    with pytest.raises(WeMaskError, match="at least one"):
        parse_schemes(" , ")
    with pytest.raises(WeMaskError, match="--fp4-block-size must be one of 16, 32, not 8"):
        parse_schemes("fp4", block_size=8)
    with pytest.raises(WeMaskError, match="--smoothquant"):
        parse_schemes("w8a8", smoothquant=-0.1)
    toy = OneLinear(torch.eye(2))
    with pytest.raises(WeMaskError, match=r"\[0, 1\]"), simulate(toy, "w8a8", smoothquant=1.5, calibration=[torch.eye(2)]):
        pass
    with pytest.raises(WeMaskError, match="calibration"), simulate(toy, "w8a8", smoothquant=0.5):
        pass


# ------------------------------------------------------------------------------------------ embedded model


@pytest.mark.embedded
def test_embedded_perplexity_degrades_with_fewer_bits_and_model_is_restored(embedded):
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "eval" / "perplexity.txt").read_text()
    ids = embedded.tokenizer(text, return_tensors="pt").input_ids[:, :256]
    model = embedded.model
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def perplexity():
        with torch.no_grad():
            return model(input_ids=ids, labels=ids).loss.exp().item()

    plain = perplexity()
    found = {}
    for scheme in ("w8a8", "w4a4"):
        with simulate(model, scheme):
            found[scheme] = perplexity()
    assert plain < found["w8a8"] < found["w4a4"]
    assert found["w8a8"] < plain * 1.5  # 8 bits stay close; 4 bits do not
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert perplexity() == plain


# ------------------------------------------------------------------------------------------ the eval axis


def test_eval_sweeps_quantization_in_one_process(monkeypatch, capsys, tmp_path, tiny_model_dir):
    import json

    from conftest import run_main

    out = tmp_path / "eval"
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--window", "32", "--limit", "2",
        "--mask-rates", "0,1", "--me-layer", "1", "--quantize", "none,w4a4", "--smoothquant", "0.5", "-o", str(out),
    )
    assert code == 0, stderr
    document = json.loads((out / "metrics.json").read_text())
    rows = [r for r in document["results"] if r["metric"] == "perplexity"]
    assert [(r["mask_rate"], r["quantize"]) for r in rows] == [(0.0, "none"), (0.0, "w4a4"), (1.0, "none"), (1.0, "w4a4")]
    none, w4a4 = rows[0], rows[1]
    assert "delta_quantize" not in none and w4a4["delta_quantize"] == pytest.approx(w4a4["value"] - none["value"])
    assert document["quantization"][1] == {"quantize": "w4a4", "block_size": 16, "smoothquant": 0.5}
    assert "w4a4" in stdout


def test_eval_refuses_bad_quantization_flags_before_loading(monkeypatch, capsys, tmp_path):
    from conftest import run_main

    for flags, message in ((["--quantize", "w3a3"], "unknown quantization scheme 'w3a3'"),
                           (["--quantize", "fp4", "--fp4-block-size", "64"], "--fp4-block-size must be one of 16, 32"),
                           (["--quantize", "w8a8", "--smoothquant", "2"], "--smoothquant takes α in [0, 1]"),
                           (["--smoothquant", "0.5"], "--smoothquant migrates activation scale before quantizing")):
        code, _, stderr = run_main(monkeypatch, capsys, "eval", "--model", str(tmp_path / "absent"), "--task",
                                   "perplexity", *flags, "-o", str(tmp_path / "out"))
        assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
