"""Statistics of eval results: a metric with its per-unit items, standard errors, paired changes, summaries.

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


def _mean_or_none(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present and len(present) == len(values) else None


def _std_over_seeds(values: list) -> float | None:
    """The std of a metric over seeds: 0 for one seed, None when a value is missing or not finite."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) if all(v is not None and math.isfinite(v) for v in values) else None


def summarize(results: list[dict], labels: list[str]) -> list[dict]:
    """One row per (variant labels, metric): mean over seeds, their std (0 for one seed), mean se, the deltas."""
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
    return summary
