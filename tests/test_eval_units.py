"""eval's building blocks: rolling windows, prefix-shared option scoring, standard errors, the table's n/a."""

from __future__ import annotations

import math
import statistics

import pytest
from conftest import make_tiny_model

from wemask_cli import WeMaskConfig, apply_wemask
from wemask_cli.engines.transformers_forward import score_options, token_logprobs
from wemask_cli.eval.scoring import rolling_windows
from wemask_cli.eval.stats import Metric, mean_se, paired_delta, proportion, summarize


@pytest.mark.parametrize("count, max_len, stride", [(1, 8, None), (8, 8, None), (9, 8, None), (50, 8, None), (50, 8, 3),
                                                    (50, 8, 1), (17, 5, 5), (23, 6, 4)])
def test_rolling_windows_score_every_token_exactly_once(count, max_len, stride):
    tokens = list(range(100, 100 + count))
    windows = rolling_windows(tokens, prefix=7, max_len=max_len, stride=stride)
    assert [t for sequence, first in windows for t in sequence[first:]] == tokens  # each once, in order
    assert windows[0][0][0] == 7 and windows[0][1] == 1  # the first token is conditioned on the prefix token
    assert all(len(sequence) - 1 <= max_len and first >= 1 for sequence, first in windows)
    for sequence, first in windows[1:]:  # later windows: contiguous text, as much carried context as fits
        end = tokens.index(sequence[-1]) + 1
        assert sequence == tokens[end - len(sequence) : end] and len(sequence) == min(max_len + 1, end)
    for sequence, first in windows[1:-1]:  # a full window scores `stride` tokens after max_len + 1 - stride of context
        assert first == max_len + 1 - (stride or max_len)


def test_rolling_windows_are_lm_evals_at_the_default_stride():
    utils = pytest.importorskip("lm_eval.utils")
    tokens = list(range(1000, 1000 + 61))
    theirs = [utils.make_disjoint_window(w) for w in utils.get_rolling_token_windows(tokens, 3, 16, 1)]
    assert rolling_windows(tokens, 3, 16) == [(context + continuation, len(context)) for context, continuation in theirs]


def plain_scores(model, groups, pad_id) -> list[float]:
    """The reference path: context + option as one sequence, one at a time, no cache, no padding."""
    out = []
    for context, options in groups:
        for option in options:
            logp = token_logprobs(model, [context + option], pad_id)[0]
            out.append(float(logp[len(context) - 1 :].sum()))
    return out


def test_prefix_shared_option_scores_equal_the_plain_path(arch, tiny_tokenizer):
    """On every architecture (sliding-window Gemma too), with and without WeMask: one cached context read
    per question gives the log-likelihoods of scoring each context + option whole."""
    model = make_tiny_model(arch, vocab_size=len(tiny_tokenizer))
    encode = lambda text: tiny_tokenizer(text, add_special_tokens=False).input_ids
    groups = [
        (encode("Question: Natalia sold 48 clips in April, how many in May?\nAnswer:"), [encode(" 24"), encode(" half as many clips"), encode(" no")]),
        (encode("Q: 2+2?\nA:"), [encode(" 4"), encode(" 5")]),
        (encode("The quick brown fox jumps over the lazy dog. What is 12 plus 30? The answer is"), [encode(" 42"), encode(" 72 def add")]),
    ]
    pad = tiny_tokenizer.pad_token_id
    for config in (None, WeMaskConfig(mask_rate=1.0, me_layer=1)):
        handle = apply_wemask(model, config) if config else None
        try:
            expected = plain_scores(model, groups, pad)
            for batch_size in (1, 3):
                got = [x for row in score_options(model, groups, pad, batch_size) for x in row]
                assert got == pytest.approx(expected, abs=2e-4), (arch, config, batch_size)
        finally:
            if handle:
                handle.remove()


def test_standard_errors_use_the_sample_variance():
    flags = [True, False, False, True, True, True, False]
    p = 4 / 7
    metric = proportion(flags)
    assert metric.value == pytest.approx(p)
    assert metric.se == pytest.approx(math.sqrt(p * (1 - p) / (7 - 1)))  # lm-eval's acc_stderr: n - 1
    values = [2.0, 3.5, 1.0, 4.0]
    assert mean_se(values) == pytest.approx(statistics.stdev(values) / 2)
    assert mean_se([3.0]) is None and proportion([True]).se is None  # one sample: no standard error
    base, other = Metric(0.5, None, [1.0, 0.0, 1.0, 0.0]), Metric(0.75, None, [1.0, 1.0, 1.0, 0.0])
    delta, se = paired_delta(other, base)
    assert delta == pytest.approx(0.25) and se == pytest.approx(statistics.stdev([0, 1, 0, 0]) / 2)
    assert paired_delta(Metric(1.0, None, [1.0]), Metric(0.0, None, [0.0])) == (1.0, None)


def test_one_window_reports_se_as_null_and_the_table_says_n_a():
    from rich.console import Console

    from wemask_cli.render.eval import eval_table

    results = [{"mask_rate": r, "mode": "free", "me_layer": 1, "seed": 0, "metric": "perplexity", "value": v, "se": None, "n": 1}
               for r, v in ((0.0, 20.0), (1.0, 30.0))]
    results[1].update(delta=10.0, delta_se=None)
    document = {"task": "perplexity", "summary": summarize(results, ["mask_rate", "mode", "me_layer"]), "unit": "windows",
                "primary_metric": "perplexity", "seeds": {"count": 1}, "n_examples": 1, "axes": ["mask_rate"]}
    assert document["summary"][0]["se"] is None
    console = Console(width=200, record=True)
    console.print(eval_table(document))
    text = console.export_text()
    assert "20 ± n/a" in text and "+10 ± n/a" in text and "± 0 " not in text
