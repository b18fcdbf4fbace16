"""Step-0 identity of the remedies and `--tokens massive` on the real embedded SmolLM2-135M-Instruct."""

from __future__ import annotations

import pytest
import torch

from wemask_cli.interventions import install_all
from wemask_cli.interventions.gated_attention import GatedAttention
from wemask_cli.interventions.gated_norm import GatedNorm
from wemask_cli.interventions.pre_affine import PreAffine
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.wemask_hook import apply_wemask

pytestmark = pytest.mark.embedded
ME = 11
TEXTS = ["Massive activations sit on the first token of every prompt.", "The cat sat. Then, the dog ran: 1, 2, 3!"]


def batch(tokenizer):
    tokenizer.padding_side = "left"
    return tokenizer(TEXTS, return_tensors="pt", padding=True)


def test_every_remedy_and_wemask_at_rate_zero_leave_the_logits_bitwise_equal(embedded):
    model, inputs = embedded.model, batch(embedded.tokenizer)
    with torch.no_grad():
        plain = model(**inputs).logits
        configs = [WeMaskConfig(mask_rate=0.0, me_layer=ME), GatedNorm(norms="both"), PreAffine(norms="both"), GatedAttention()]
        with install_all(model, configs) as installation:
            assert len(installation.items[1].modules) == 60 and installation.parameters()[0].dtype == torch.float32
            assert torch.equal(model(**inputs).logits, plain)
            for p in installation.parameters():
                p.add_(0.01)
            assert not torch.equal(model(**inputs).logits, plain)
        assert torch.equal(model(**inputs).logits, plain)


def test_massive_tokens_are_the_first_token_on_the_embedded_model(embedded):
    """From its ME layer on, only the first token is massive (others stay under 1.5x the median): same logits."""
    model, inputs = embedded.model, batch(embedded.tokenizer)
    outputs = {}
    with torch.no_grad():
        for tokens in ("first", "massive"):
            with apply_wemask(model, WeMaskConfig(mask_rate=0.3, me_layer=ME, tokens=tokens)):
                outputs[tokens] = model(**inputs).logits
    assert torch.equal(outputs["first"], outputs["massive"])
