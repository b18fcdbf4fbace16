"""Paired significance of each mask rate against r = 0: the bootstrap 95% interval, the sign-flip and McNemar
p-values (known answers), and their place in metrics.json, results.csv, the eval table and `wemask report`."""

from __future__ import annotations

import csv
import itertools
import json
import statistics
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.eval.stats import (
    Metric,
    exp_metric,
    mcnemar_exact_p,
    paired_bootstrap_interval,
    paired_test,
    proportion,
    sign_flip_p_value,
)
from wemask_cli.eval.sweep import Axis, add_paired_tests

PPL_TEXT = Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "eval" / "perplexity.txt"
CHOICE_ROWS = [{"question": f"What is {i} plus {i}?", "choices": [str(2 * i), str(2 * i + 1), "no"], "answer": i % 2}
               for i in range(12)]  # fmt: skip


def brute_force_p(diffs: list[float]) -> float:
    """Every sign pattern, in plain Python: the share whose |mean| reaches the observed one."""
    observed = abs(statistics.fmean(diffs))
    flips = [abs(statistics.fmean(s * d for s, d in zip(signs, diffs))) for signs in itertools.product((1, -1), repeat=len(diffs))]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def test_mcnemar_exact_p_matches_the_hand_computed_binomial():
    # 3 units right only at the rate, 1 right only at r = 0: 2 * P(X <= 1 | Bin(4, 1/2)) = 2 * 5/16
    assert mcnemar_exact_p([1, 1, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]) == pytest.approx(0.625)
    assert mcnemar_exact_p([1] * 6 + [0], [0] * 6 + [0]) == pytest.approx(2 / 64)  # 6 discordant, all one way
    assert mcnemar_exact_p([1, 0, 1], [1, 0, 1]) == 1.0  # no discordant pair
    assert mcnemar_exact_p([1, 0], [0, 1]) == 1.0  # 1 each way: capped at 1


@pytest.mark.parametrize("diffs", [[0.5, -0.2, 1.0, 0.3, 0.0, 0.7], [1.0, 2.0, -0.5, 0.25, 3.0, -1.0, 0.1, 0.4, 0.9]])
def test_sign_flip_enumerates_every_pattern_for_small_samples(diffs):
    assert sign_flip_p_value(diffs, seed=0) == pytest.approx(brute_force_p(diffs))
    assert sign_flip_p_value(diffs, seed=0) == sign_flip_p_value(diffs, seed=5)  # exact: no draw
    assert sign_flip_p_value([0.0, 0.0, 0.0], seed=0) == 1.0


def test_sign_flip_draws_are_seeded_and_near_the_exact_value_for_larger_samples():
    diffs = [0.3 * ((i * 7) % 5 - 1.5) + 0.15 for i in range(18)]  # 18 units: drawn, not enumerated
    drawn = sign_flip_p_value(diffs, seed=0)
    assert drawn == sign_flip_p_value(diffs, seed=0) and drawn != sign_flip_p_value(diffs, seed=1)
    assert drawn == pytest.approx(brute_force_p(diffs), abs=0.02)


def test_bootstrap_interval_holds_the_mean_and_is_seeded():
    diffs = [0.5, -0.2, 1.0, 0.3, 0.0, 0.7, -0.4, 1.2, 0.1, 0.6]
    low, high = paired_bootstrap_interval(diffs, seed=0)
    assert low < statistics.fmean(diffs) < high and min(diffs) <= low and high <= max(diffs)
    assert paired_bootstrap_interval(diffs, seed=0) == (low, high)
    assert paired_bootstrap_interval(diffs, seed=1) != (low, high)
    assert paired_bootstrap_interval([0.4], seed=0) is None


def test_paired_test_chooses_mcnemar_for_accuracies_and_carries_perplexity_to_its_scale():
    test = paired_test(proportion([True, True, False, True]), proportion([False, True, False, False]))
    assert test["test"] == "mcnemar" and test["p_value"] == pytest.approx(mcnemar_exact_p([1, 1, 0, 1], [0, 1, 0, 0]))
    masked, plain = exp_metric([2.0, 2.5, 3.1, 2.2, 2.8], 13.0), exp_metric([1.9, 2.4, 3.0, 2.3, 2.5], 11.0)
    test = paired_test(masked, plain)
    assert test["test"] == "sign-flip" and test["paired_ci95"][0] < 13.0 - 11.0 < test["paired_ci95"][1]
    assert paired_test(Metric(1.0, None, [1.0, 2.0], pairable=False), Metric(1.0, None, [1.0, 2.0])) is None


def test_several_seeds_are_tested_on_their_per_unit_means():
    labels = ["mask_rate", "mode", "me_layer"]
    items, results = {}, []
    for rate, seed, flags in ((0.0, 0, [1, 0, 0, 1]), (0.0, 1, [1, 0, 1, 1]), (1.0, 0, [1, 1, 1, 1]), (1.0, 1, [0, 1, 1, 1])):
        row = {"mask_rate": rate, "mode": "free", "me_layer": 0, "seed": seed, "metric": "accuracy"}
        results.append(row)
        items[(rate, "free", 0, seed, "accuracy")] = proportion([bool(f) for f in flags])
    pooled = add_paired_tests(results, items, Axis("mask_rate", [], reference=0.0), labels)
    assert "p_value" not in results[0] and results[2]["test"] == "mcnemar"  # per seed: 0/1 units
    # per unit, the seeds' means: r = 0 [1, 0, 0.5, 1], r = 1 [0.5, 1, 1, 1], not 0/1
    assert len(pooled) == 1 and pooled[0]["test"] == "sign-flip"
    assert pooled[0]["p_value"] == pytest.approx(brute_force_p([-0.5, 1.0, 0.5, 0.0]))


def eval_run(monkeypatch, capsys, model: str, out: Path, *args: str) -> tuple[dict, list[dict], str]:
    code, stdout, err = run_main(monkeypatch, capsys, "eval", "--model", model, *args, "--mask-rates", "0,1",
                                 "--output", str(out))
    assert code == 0, err
    return json.loads((out / "metrics.json").read_text()), list(csv.DictReader((out / "results.csv").open())), stdout


def test_eval_and_report_show_the_paired_interval_and_p_value(monkeypatch, capsys, tiny_model_dir, tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in CHOICE_ROWS))
    ppl_doc, ppl_rows, ppl_table = eval_run(monkeypatch, capsys, tiny_model_dir, tmp_path / "ppl", "--task", "perplexity",
                                            "--data", str(PPL_TEXT), "--window", "16", "--limit", "6", "--me-layer", "1")
    choice_doc, choice_rows, choice_table = eval_run(monkeypatch, capsys, tiny_model_dir, tmp_path / "choice", "--task", "choice",
                                                     "--data", str(data), "--me-layer", "0")
    for doc, rows, table, test in ((ppl_doc, ppl_rows, ppl_table, "sign-flip"), (choice_doc, choice_rows, choice_table, "mcnemar")):
        primary = doc["primary_metric"]
        plain, masked = [r for r in doc["results"] if r["metric"] == primary]
        assert "p_value" not in plain and masked["test"] == test and 0 < masked["p_value"] <= 1
        low, high = masked["paired_ci95"]
        assert low <= masked["delta"] <= high
        assert doc["paired"]["seed"] == 0 and doc["paired"]["resamples"] == 10000 and doc["paired"]["against"] == "mask_rate=0"
        summary = next(s for s in doc["summary"] if s["metric"] == primary and s["mask_rate"] == 1.0)
        assert (summary["paired_ci95"], summary["p_value"], summary["test"]) == ([low, high], masked["p_value"], test)
        row = next(r for r in rows if r["metric"] == primary and float(r["mask_rate"]) == 1.0)
        assert (float(row["paired_ci95_low"]), float(row["paired_ci95_high"]), row["test"]) == (low, high, test)
        assert next(r for r in rows if r["metric"] == primary and float(r["mask_rate"]) == 0.0)["p_value"] == ""
        assert "95% CI, p" in table and f"p={masked['p_value']:.2g}" in table
        assert max(len(line) for line in table.splitlines()) <= 80
    code, stdout, err = run_main(monkeypatch, capsys, "report", str(tmp_path / "ppl"), str(tmp_path / "choice"), "--no-plot",
                                 "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"))
    assert code == 0, err
    reported = json.loads((tmp_path / "r.json").read_text())
    masked = next(r for r in reported if r["metric"] == "choice/accuracy" and r["mask_rate"] == 1.0)
    expected = next(r for r in choice_doc["results"] if r["metric"] == "accuracy" and r["mask_rate"] == 1.0)
    assert (masked["paired_ci95_low"], masked["paired_ci95_high"]) == tuple(expected["paired_ci95"])
    assert (masked["p_value"], masked["test"], masked["delta"]) == (expected["p_value"], "mcnemar", expected["delta"])
    plain = next(r for r in reported if r["metric"] == "choice/accuracy" and r["mask_rate"] == 0.0)
    assert plain["p_value"] is None
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert {"delta", "paired_ci95_low", "paired_ci95_high", "p_value", "test"} <= set(header)
    assert f"p={expected['p_value']:.2g} vs r=0" in stdout
