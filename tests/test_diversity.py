"""Diversity measures (SPEC section 6, method/diversity.py): hand-made tensors with known answers, and the same
numbers for a prompt alone and inside a left- or right-padded batch."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import make_tiny_model, run_main

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


# ---------------------------------------------------------------- wemask eval --task diversity


def test_eval_diversity_sweeps_the_real_mask(monkeypatch, capsys, tiny_model_dir, tmp_path):
    out = tmp_path / "div"
    code, stdout, err = run_main(
        monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "diversity", "--limit", "4",
        "--mask-rates", "0,0.5,1", "--me-layer", "1", "--per-layer", "--output", str(out),
    )
    assert code == 0, err
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["primary_metric"] == "effective_rank_rest" and doc["unit"] == "prompts" and doc["n_examples"] == 4
    assert doc["diversity"] == {"from_layer": 1, "from_layer_source": "the ME layer of the mask"}
    rows = {(r["metric"], r["mask_rate"]): r for r in doc["results"]}
    for name in NAMES:
        assert rows[name, 0.0]["n"] >= 3 and rows[name, 0.0]["se"] is not None, name
    layers = 4  # the tiny model's
    for layer in range(layers):
        r0, r1 = rows[f"effective_rank_rest@{layer}", 0.0], rows[f"effective_rank_rest@{layer}", 1.0]
        if layer < 1:  # before the mask's first layer nothing changes
            assert r1["value"] == pytest.approx(r0["value"], abs=1e-9) and r1["delta"] == pytest.approx(0, abs=1e-9)
        else:
            assert r1["value"] != pytest.approx(r0["value"], abs=1e-6)
    assert rows["attention_entropy@1", 1.0]["value"] != pytest.approx(rows["attention_entropy@1", 0.0]["value"], abs=1e-6)
    examples = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert len(examples) == 12 and len(examples[0]["effective_rank_rest"]) == layers
    assert "effective_rank_rest@3" in stdout and "attention_entropy@0" in stdout  # every column readable
    code, _, err = run_main(monkeypatch, capsys, "report", str(out), "--json", str(tmp_path / "r.json"), "--no-plot")
    assert code == 0, err
    merged = json.loads((tmp_path / "r.json").read_text())
    assert {r["mask_rate"] for r in merged if r["metric"] == "diversity/effective_rank_rest"} == {0.0, 0.5, 1.0}


def test_eval_diversity_refuses_a_layer_the_model_lacks(monkeypatch, capsys, tiny_model_dir, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "diversity", "--limit", "2",
                            "--from-layer", "9", "--output", str(tmp_path / "o"))
    assert code == 2 and "--from-layer 9 is not a layer of this model: give 0 to 3" in err


@pytest.mark.embedded
def test_mask_changes_diversity_from_the_me_layer_on_and_not_before(embedded):
    from wemask_cli import WeMaskConfig
    from wemask_cli.engines.transformers import TransformersEngine
    from wemask_cli.eval.settings import EvalSettings
    from wemask_cli.eval.sweep import run_sweep, wemask_axis
    from wemask_cli.eval.tasks.registry import task_class
    from wemask_cli.eval.tasks.resolve import resolve
    from wemask_cli.method.wemask_hook import masked_layers
    from wemask_cli.prompts.rendering import context_length

    me = 11
    settings = resolve(EvalSettings(task="diversity", window=128, batch_size=8, options={"per_layer": True}))
    task = task_class("diversity")(settings)
    prepared = task.prepare(embedded.tokenizer, task.load(), context_length(embedded.model))
    configs = [WeMaskConfig(mask_rate=r, me_layer=me) for r in (0.0, 0.3, 1.0)]
    task.plan(configs)
    sweep = run_sweep(TransformersEngine(embedded), [wemask_axis(configs)], task, prepared, settings, 8)
    assert masked_layers(embedded.model) == [] and task.start == (me, "the ME layer of the mask")
    rows = {(r["metric"], r["mask_rate"]): r for r in sweep.results}
    for name in NAMES:
        for layer in range(30):
            base, masked = rows[f"{name}@{layer}", 0.0]["value"], rows[f"{name}@{layer}", 1.0]["value"]
            if layer < me or (layer == me and name == "attention_entropy_rest"):  # at the ME layer the mask changes
                assert masked == pytest.approx(base, rel=1e-6, abs=1e-9), (name, layer)  # only the first key's share
            else:
                assert masked != pytest.approx(base, rel=1e-4, abs=1e-6), (name, layer)
    shown = {f"{name} r={r:g}": round(rows[name, r]["value"], 4) for name in NAMES for r in (0.0, 0.3, 1.0)}
    print(shown)
    assert rows["effective_rank_rest", 1.0]["delta"] != 0 and rows["effective_rank_rest", 1.0]["delta_se"] > 0
