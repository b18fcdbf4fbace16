"""Diversity measures (SPEC section 6, method/diversity.py): hand-made tensors with known answers, and the same
numbers for a prompt alone and inside a left- or right-padded batch."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import make_tiny_model

from wemask_cli.method.diversity import NAMES, attention_entropy, collect_diversity, hidden_measures, mean_cosine, spectrum


def test_cosine_of_known_rows():
    assert mean_cosine(torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])) == pytest.approx(1.0)
    assert mean_cosine(torch.tensor([[1.0, 0.0], [0.0, 3.0]])) == pytest.approx(0.0)
    assert mean_cosine(torch.tensor([[1.0, 0.0], [-2.0, 0.0]])) == pytest.approx(-1.0)
    assert math.isnan(mean_cosine(torch.tensor([[1.0, 0.0]])))


def test_spectrum_of_orthogonal_equal_norm_centred_rows():
    rows = torch.tensor([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]])  # centred; sigma = sqrt2, sqrt2
    assert spectrum(rows) == pytest.approx((2.0, 2.0))
    rows = torch.cat([torch.eye(3), -torch.eye(3)]) * 5 + 7  # shifted: centring removes the shift
    assert spectrum(rows) == pytest.approx((3.0, 3.0))
    unequal = torch.tensor([[2.0, 0], [-2, 0], [0, 1], [0, -1]])  # sigma 2sqrt2, sqrt2: p = 2/3, 1/3
    erank, ratio = spectrum(unequal)
    assert erank == pytest.approx(math.exp(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))))
    assert ratio == pytest.approx(10**2 / (8**2 + 2**2))
    assert all(math.isnan(v) for v in spectrum(torch.ones(4, 3)))  # identical rows: nothing to spread


def test_first_token_excluded_drops_the_first_row():
    h = torch.tensor([[100.0, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]])
    values = hidden_measures(h)
    assert values["effective_rank_rest"] == pytest.approx(2.0) and values["participation_ratio_rest"] == pytest.approx(2.0)
    assert values["effective_rank"] < 2.0  # the massive first token dominates the spectrum
    assert values["cosine_rest"] == pytest.approx(mean_cosine(h[1:]))


def test_uniform_attention_has_entropy_log_n():
    whole, rest = attention_entropy(torch.full((2, 4, 4), 0.25))
    assert whole == pytest.approx(math.log(4)) and rest == pytest.approx(math.log(3))
    sink = torch.zeros(3, 4, 4)
    sink[..., 0] = 1.0  # all on the first token: nothing left after it
    assert attention_entropy(sink)[0] == pytest.approx(0.0) and math.isnan(attention_entropy(sink)[1])


PROMPTS = [[5, 17, 42, 9, 33], [11, 12, 99, 4, 8, 61, 70, 3, 2], [77], [7, 8, 9]]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3_text"])
def test_padded_batch_gives_the_numbers_of_each_prompt_alone(arch):
    model = make_tiny_model(arch)
    alone = collect_diversity(model, PROMPTS, batch_size=1)
    for side in ("left", "right"):
        batched = collect_diversity(model, PROMPTS, batch_size=4, padding_side=side)
        for name in NAMES:
            torch.testing.assert_close(batched.values[name], alone.values[name], rtol=1e-4, atol=1e-5, equal_nan=True,
                                       msg=f"{side} {name}")
    assert not torch.isnan(alone.values["attention_entropy"][0]).any(), "attention weights were not captured"
    assert not torch.isnan(alone.values["effective_rank_rest"][1]).any()
    assert torch.isnan(alone.values["cosine"][2]).all()  # the 1-token prompt has no pairs
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()), "hooks left behind"
