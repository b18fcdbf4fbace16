"""Statistics of eval results: a metric with its per-unit items, standard errors, paired changes and their
significance (a seeded paired bootstrap 95% interval, a sign-flip or McNemar p-value), summaries.

Standard errors use the sample variance (n - 1), as lm-evaluation-harness does; a metric over a single unit has
no standard error (None, shown as "n/a").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass
class Metric:
    """A metric's value, its standard error over units (None with one unit), and the per-unit items it averages.

    `exp`: the value is exp(mean of items) (perplexity from NLLs, standard error by the delta method);
    `pairable`: paired changes may be computed from `items` (False when the value is not their mean).
    """

    value: float
    se: float | None
    items: list[float]
    exp: bool = False
    pairable: bool = True


def mean_se(values: list[float]) -> float | None:
    """Standard error of the mean with the sample variance (n - 1); None for fewer than two values or when one
    is not finite (statistics.stdev fails on NaN mixed with infinity)."""
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return None
    return statistics.stdev(values) / math.sqrt(len(values))


def proportion(flags: list[bool]) -> Metric:
    """A share of true flags; se = sqrt(p (1 - p) / (n - 1)), lm-eval's stderr of a 0/1 mean."""
    items = [float(f) for f in flags]
    return Metric(statistics.fmean(items), mean_se(items), items)


def mean_metric(items: list[float]) -> Metric:
    """The mean of per-unit values with its standard error."""
    return Metric(statistics.fmean(items), mean_se(items), list(items))


def exp_metric(nlls: list[float], value: float, pairable: bool = True) -> Metric:
    """exp-type metric (a perplexity `value`) with the delta-method error over per-unit mean NLLs `nlls`."""
    se = mean_se(nlls)
    return Metric(value, None if se is None else value * se, list(nlls), exp=True, pairable=pairable)


def paired_delta(metric: Metric, base: Metric) -> tuple[float, float | None] | None:
    """(metric - base, its standard error paired unit by unit), None when the two cannot be paired."""
    if not (metric.pairable and base.pairable) or len(metric.items) != len(base.items) or metric.exp != base.exp:
        return None
    if not metric.items:
        return None
    se = mean_se([a - b for a, b in zip(metric.items, base.items)])
    if se is not None and metric.exp:
        se *= metric.value
    return metric.value - base.value, se


PAIRED_KEYS = ("paired_ci95", "p_value", "test")
PAIRED_SEED = 0  # the seed of every paired bootstrap and sign-flip draw (recorded in metrics.json)
RESAMPLES = 10_000  # bootstrap resamples and random sign flips
EXACT_FLIPS = 16  # up to this many units the sign-flip test enumerates all 2^n sign patterns
CHUNK = 1_000  # resamples drawn at once (memory: CHUNK x n)


def paired_bootstrap_interval(diffs: list[float], seed: int, resamples: int = RESAMPLES) -> tuple[float, float] | None:
    """The percentile 95% interval of the mean of per-unit differences over `resamples` bootstrap resamples of the
    units (numpy's default_rng(seed)); None for fewer than two units."""
    import numpy as np

    values = np.asarray(diffs, dtype=float)
    if len(values) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = np.concatenate([values[rng.integers(0, len(values), (min(CHUNK, resamples - start), len(values)))].mean(axis=1)
                            for start in range(0, resamples, CHUNK)])
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def sign_flip_p_value(diffs: list[float], seed: int, resamples: int = RESAMPLES) -> float | None:
    """Two-sided paired permutation p-value of the mean difference: the share of sign patterns whose |mean| is at
    least the observed one; every pattern when n <= EXACT_FLIPS, else `resamples` random ones ((1 + k) / (1 + R)).
    None for no units."""
    import itertools

    import numpy as np

    values = np.asarray(diffs, dtype=float)
    if len(values) == 0:
        return None
    observed = abs(values.mean()) - 1e-12 * max(1.0, float(np.abs(values).max()))  # ties count as extreme
    if len(values) <= EXACT_FLIPS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(values))))
        return float(np.mean(np.abs(signs @ values / len(values)) >= observed))
    rng = np.random.default_rng(seed)
    extreme = sum(int(np.sum(np.abs((rng.integers(0, 2, (min(CHUNK, resamples - start), len(values))) * 2 - 1) @ values)
                                    / len(values) >= observed)) for start in range(0, resamples, CHUNK))
    return (1 + extreme) / (1 + resamples)


def mcnemar_exact_p(a: list[float], b: list[float]) -> float:
    """McNemar's exact two-sided p-value of paired 0/1 items: the binomial(discordant, 1/2) test of how many of the
    discordant pairs favour `a`; 1.0 with no discordant pair."""
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    discordant = only_a + only_b
    tail = sum(math.comb(discordant, k) for k in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**discordant)


def is_binary(items: list[float]) -> bool:
    return all(v in (0.0, 1.0) for v in items)


def paired_test(metric: Metric, base: Metric, seed: int = PAIRED_SEED, resamples: int = RESAMPLES) -> dict | None:
    """The significance of metric - base, paired unit by unit: `paired_ci95` (the bootstrap interval; for an exp
    metric the interval of the mean NLL difference carried to its scale), `p_value` and `test` (McNemar's exact test
    when both are 0/1 per unit, else the sign flip); None when the two cannot be paired."""
    if paired_delta(metric, base) is None:
        return None
    diffs = [a - b for a, b in zip(metric.items, base.items)]
    if not all(math.isfinite(d) for d in diffs):
        return None
    interval = paired_bootstrap_interval(diffs, seed, resamples)
    if interval is not None:
        mean = statistics.fmean(diffs)
        interval = [metric.value * math.exp(x - mean) - base.value if metric.exp else x for x in interval]
    binary = not metric.exp and is_binary(metric.items) and is_binary(base.items)
    p_value = mcnemar_exact_p(metric.items, base.items) if binary else sign_flip_p_value(diffs, seed, resamples)
    return {"paired_ci95": interval, "p_value": p_value, "test": "mcnemar" if binary else "sign-flip"}


def seed_mean(metrics: list[Metric]) -> Metric:
    """One metric's runs over seeds as one: the mean value, and per unit the mean over seeds (for pooled tests)."""
    items = [statistics.fmean(unit) for unit in zip(*(m.items for m in metrics))]
    return Metric(statistics.fmean(m.value for m in metrics), None, items, metrics[0].exp, all(m.pairable for m in metrics))


def _mean_or_none(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present and len(present) == len(values) else None


def _std_over_seeds(values: list) -> float | None:
    """The std of a metric over seeds: 0 for one seed, None when a value is missing or not finite."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) if all(v is not None and math.isfinite(v) for v in values) else None


def summarize(results: list[dict], labels: list[str], paired: list[dict] = ()) -> list[dict]:
    """One row per (variant labels, metric): mean over seeds, their std (0 for one seed), mean se, the deltas, and
    the `paired` tests (over the seeds' unit means) of the same labels and metric."""
    groups: dict[tuple, list[dict]] = {}
    for row in results:
        groups.setdefault(tuple(row.get(k) for k in labels) + (row["metric"],), []).append(row)
    summary = []
    for key, rows in groups.items():
        values = [r["value"] for r in rows]
        entry = {**dict(zip(labels, key[:-1])), "metric": key[-1], "mean": _mean_or_none(values),
                 "std": _std_over_seeds(values), "se": _mean_or_none([r["se"] for r in rows]),
                 "seeds": len(rows), "n": rows[0]["n"]}
        for delta_key in sorted({k for r in rows for k in r if k.startswith("delta") and not k.endswith("_se")}):
            deltas = [r.get(delta_key) for r in rows]
            if None in deltas:
                continue
            entry[delta_key] = statistics.fmean(deltas)
            # one seed: the paired standard error; several: the std of the difference across seeds
            entry[f"{delta_key}_se"] = _std_over_seeds(deltas) if len(deltas) > 1 else rows[0].get(f"{delta_key}_se")
        summary.append(entry)
    tests = {tuple(t.get(k) for k in labels) + (t["metric"],): t for t in paired}
    for entry in summary:
        test = tests.get(tuple(entry.get(k) for k in labels) + (entry["metric"],), {})
        entry.update({k: test[k] for k in PAIRED_KEYS if k in test})
    return summary
