"""`wemask locate`'s massive-token report (issue 12): the `--tokens massive` rule, and a planted massive token found
by position and text."""

from __future__ import annotations

import torch
from conftest import make_tiny_model

from wemask_cli.method.massive_tokens import prefix_ratio
from wemask_cli.method.tokens import MASSIVE_RATIO, massive_token_positions
from wemask_cli.models.loading import LoadedModel


def test_the_report_flags_the_tokens_that_tokens_massive_masks():
    """Same rule as the mask (which always adds the first token), on norms where it matters which tokens count."""
    norms = torch.tensor([[100.0, 1.0, 2.0, 3.0, 90.0, 1.0], [100.0, 1.0, 30.0, 3.0, 4.0, 200.0], [1.0] * 6])
    for layer in norms:
        picked = massive_token_positions(layer[None, :, None], None, torch.arange(6)[None])[0]  # |x| is x's norm
        flagged = prefix_ratio(layer[None])[0] > MASSIVE_RATIO
        assert picked.tolist() == (flagged | (torch.arange(6) == 0)).tolist()
    assert prefix_ratio(norms)[:, 0].tolist() == [50.0, 25.0, 1.0]  # the first: over the median of all the others
    assert prefix_ratio(norms)[1, 2] == 30.0  # the first left out: 30 / median(1, 30), not / median(100, 1, 30)


def test_locate_reports_a_massive_activation_planted_on_a_middle_token(tiny_tokenizer):
    """A tiny model given an ME layer (layer 2's FFN writes a jump on the first token) and a 500x embedding row
    for ' clips': the report names that token and where it sits, in the prompts that hold it, and only there."""
    from wemask_cli.commands.locate_report import run_locate

    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    (clips,) = tiny_tokenizer(" clips")["input_ids"]
    with torch.no_grad():
        model.model.embed_tokens.weight[clips] *= 500

    def jump(module, args, output):  # batch size 1 below: position 0 is the first real token
        output = output.clone()
        output[:, 0, 0] += 1000.0
        return output

    model.model.layers[2].mlp.register_forward_hook(jump)
    prompts = ["The quick brown fox jumps over the lazy dog.", "Natalia sold clips to her friends in April.",
               "She sold clips in May."]  # fmt: skip
    report = run_locate(LoadedModel(model, tiny_tokenizer, "tiny"), prompts, batch_size=1)
    assert report["me_layer"] == 2
    massive = report["massive_tokens"]
    found = [[(t["position"], t["text"]) for t in p["tokens"]] for p in massive["prompts"]]
    assert found == [[(0, "The")], [(0, "N"), (6, " clips")], [(0, "S"), (3, " clips")]]
    assert massive["beyond_first"] == 2 and massive["first_massive"] == 3
    assert massive["texts_beyond_first"] == [{"text": " clips", "prompts": 2}]
    assert "than the first in 2/3 prompts (' clips' in 2; e.g. prompt 1, position 6 ' clips')" in report["verdict"]
    assert "--tokens massive masks more than --tokens first here." in report["verdict"]
