"""The paper's pattern on the real embedded SmolLM2-135M-Instruct (ME layer 11) and the shipped text."""

from __future__ import annotations

import pytest

from wemask_cli import WeMaskConfig
from wemask_cli.engines.transformers import TransformersEngine
from wemask_cli.eval.settings import EvalSettings
from wemask_cli.eval.sweep import run_sweep, wemask_axis
from wemask_cli.eval.tasks.registry import task_class
from wemask_cli.eval.tasks.resolve import resolve
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.prompts.rendering import context_length

pytestmark = pytest.mark.embedded
ME = 11


def test_perplexity_rises_at_r1_and_stays_close_up_to_r07(embedded):
    settings = resolve(EvalSettings(task="perplexity", window=128, limit=8, batch_size=4))
    task = task_class(settings.task)(settings)
    data = task.load()  # the bundled eval/perplexity.txt
    prepared = task.prepare(embedded.tokenizer, data, context_length(embedded.model))
    configs = [WeMaskConfig(mask_rate=r, me_layer=ME) for r in (0.0, 0.3, 0.7, 1.0)]
    sweep = run_sweep(TransformersEngine(embedded), [wemask_axis(configs)], task, prepared, settings, 4)
    assert masked_layers(embedded.model) == []
    ppl = {r["mask_rate"]: r for r in sweep.results if r["metric"] == "perplexity"}
    base = ppl[0.0]["value"]
    assert 5 < base < 200  # a trained model on plain English prose
    for rate in (0.3, 0.7):
        assert abs(ppl[rate]["value"] - base) < 0.15 * base, (rate, ppl[rate]["value"], base)
    assert ppl[1.0]["value"] > 1.2 * base
    assert ppl[1.0]["delta"] > 3 * ppl[1.0]["delta_se"]  # clearly above r = 0, paired window by window
    assert ppl[1.0]["value"] > max(ppl[0.3]["value"], ppl[0.7]["value"])
