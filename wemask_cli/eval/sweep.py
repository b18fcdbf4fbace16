"""The sweep: every variant of the loaded model (one setting per axis) x every seed, the model loaded once.

An *axis* is one dimension of the sweep (the mask rate; later the quantization): a name, its settings, and the
reference setting that paired changes are measured against. A *setting* labels result rows and applies itself
to the engine (engines/base.py) as a context manager, removing exactly what it installed on exit. A *variant* is one setting per
axis, applied together (the first axis outermost). To add an axis, build an `Axis` (see `wemask_axis`, and
`wemask_cli.eval.quantize`) and pass it to `run_sweep` with the others.

Result rows carry every label of their variant (`mask_rate`, `mode`, `me_layer`, ...), `seed`, `metric`, `value`,
`se`, `n`; for each axis with a reference, `<delta_key>` and `<delta_key>_se`: the change from the variant that
differs only in that axis's setting, paired unit by unit (mask rate: `delta`, against r = 0); none on the reference.
Rows off r = 0 also carry the paired significance of that change (stats.paired_test: `paired_ci95`, `p_value`,
`test`), and `SweepResult.paired` the same tests per variant over its seeds' unit means (for the summary).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

from wemask_cli.eval.settings import EvalSettings
from wemask_cli.eval.stats import Metric, paired_delta, paired_test, seed_mean
from wemask_cli.outputs.trained import mode_at
from wemask_cli.runtime.progress import task as progress_task


@dataclass
class Setting:
    """One value on one axis: `labels` for the result rows (they must include the axis name), and `apply(engine)`,
    a context manager that installs the setting and yields a JSON-able record of what it installed (or None)."""

    labels: dict[str, Any]
    apply: Callable[[Any], AbstractContextManager]


@dataclass
class Axis:
    """One dimension of the sweep. `reference`: the label value changes are measured against (None: no change
    reported); `delta_key`: the result keys of that change (`<delta_key>`, `<delta_key>_se`); `record_key`: where
    the settings' records go in metrics.json (one entry per setting)."""

    name: str
    settings: list[Setting]
    reference: Any = None
    delta_key: str = "delta"
    record_key: str | None = None


@dataclass
class SweepResult:
    """Result rows, per-unit records (labelled like the rows), what each axis applied, the variants' label keys."""

    results: list[dict]
    records: list[dict]
    applied: dict[str, list] = field(default_factory=dict)  # record_key -> the records of that axis's settings
    labels: list[str] = field(default_factory=list)
    deltas: dict[str, str] = field(default_factory=dict)  # delta key -> what it is measured against ("mask_rate=0")
    paired: list[dict] = field(default_factory=list)  # per variant and metric off r = 0: its paired test over seeds


def wemask_axis(configs: list, trained: dict | None = None) -> Axis:
    """The mask-rate axis: one setting per WeMaskConfig (None: no mask), labels mask_rate, mode, me_layer; `trained`:
    the metrics of the wemask training run the model comes from (outputs/trained.py), which names the modes."""
    return Axis("mask_rate", [wemask_setting(config, trained) for config in configs], reference=0.0, record_key="wemask")


def wemask_setting(config, trained: dict | None = None) -> Setting:
    """A WeMaskConfig (None: no mask) as a sweep setting, installed by the engine's `use_mask`; its mode is
    outputs.trained.mode_at's ('plain' at r = 0, blank on a model nothing trained)."""
    from contextlib import contextmanager, nullcontext

    if config is None:
        return Setting({"mask_rate": 0.0, "mode": mode_at(0.0, trained), "me_layer": None}, lambda engine: nullcontext(None))

    @contextmanager
    def apply(engine):
        with engine.use_mask(config) as resolved:  # removes exactly what it installed
            yield resolved.to_dict()  # the resolved config, with the dims chosen per layer

    mode = mode_at(config.mask_rate, trained, config.mode)
    return Setting({"mask_rate": config.mask_rate, "mode": mode, "me_layer": config.me_layer}, apply)


def run_sweep(engine, axes: list[Axis], task, prepared, settings: EvalSettings, batch_size: int) -> SweepResult:
    """Evaluate every variant x seed with `task` on its `prepared` work on the loaded `engine`; paired changes for
    every reference axis."""
    results, records, items = [], [], {}
    applied: dict[str, dict] = {axis.record_key: {} for axis in axes if axis.record_key}
    labels = list(dict.fromkeys(key for axis in axes for setting in axis.settings for key in setting.labels))
    for combo in itertools.product(*(list(enumerate(axis.settings)) for axis in axes)):
        variant = {k: v for _, setting in combo for k, v in setting.labels.items()}
        with ExitStack() as stack:
            for axis, (index, setting) in zip(axes, combo):
                record = stack.enter_context(setting.apply(engine))
                if axis.record_key:
                    applied[axis.record_key][index] = record
            for seed in range(settings.seeds):
                description = describe(variant, task.name, seed if settings.seeds > 1 else None)
                with progress_task(description, prepared.units) as advance:
                    scored = task.evaluate(engine, engine.tokenizer, prepared, seed, batch_size, advance)
                for metric, value in scored.metrics.items():
                    n = scored.n.get(metric) if isinstance(scored.n, dict) else scored.n
                    results.append({**variant, "seed": seed, "metric": metric, "value": value.value, "se": value.se, "n": n})
                    items[key_of(variant, labels, seed, metric)] = value
                records.extend({**variant, "seed": seed, **record} for record in scored.records)
    add_deltas(results, items, axes, labels)
    paired = add_paired_tests(results, items, axes[0], labels) if axes and axes[0].name == "mask_rate" else []
    applied_lists = {key: [found[i] for i in sorted(found)] for key, found in applied.items()}
    deltas = {axis.delta_key: f"{axis.name}={axis.reference:g}" if isinstance(axis.reference, float) else f"{axis.name}={axis.reference}"
              for axis in axes if axis.reference is not None}
    return SweepResult(results, records, applied_lists, labels, deltas, paired)


def key_of(variant: dict, labels: list[str], seed: int, metric: str) -> tuple:
    return tuple(variant.get(k) for k in labels) + (seed, metric)


def reference_labels(axis: Axis) -> dict | None:
    """The labels of the axis's reference setting (r = 0's, mode included), or None when it has none."""
    return next((s.labels for s in axis.settings if s.labels.get(axis.name) == axis.reference), None)


def add_deltas(results: list[dict], items: dict[tuple, Metric], axes: list[Axis], labels: list[str]) -> None:
    """For each axis with a reference: the paired change from the variant at the reference (its setting's labels,
    the same labels of the other axes)."""
    for axis in axes:
        reference = reference_labels(axis)
        if axis.reference is None or reference is None:
            continue
        for row in results:
            if row.get(axis.name) == axis.reference:
                continue  # the reference itself: no change to show
            base = items.get(key_of({**row, **reference}, labels, row["seed"], row["metric"]))
            delta = paired_delta(items[key_of(row, labels, row["seed"], row["metric"])], base) if base else None
            if delta is not None:
                row[axis.delta_key], row[f"{axis.delta_key}_se"] = delta


def add_paired_tests(results: list[dict], items: dict[tuple, Metric], axis: Axis, labels: list[str]) -> list[dict]:
    """Each row off the axis's reference gets its paired test against the reference (same seed, other labels);
    returns one test per variant and metric over its seeds' unit means (one seed: the row's own)."""
    pooled: dict[tuple, list] = {}
    reference = reference_labels(axis) or {axis.name: axis.reference}
    for row in results:
        base = items.get(key_of({**row, **reference}, labels, row["seed"], row["metric"]))
        if row[axis.name] == axis.reference or base is None:
            continue
        metric = items[key_of(row, labels, row["seed"], row["metric"])]
        test = paired_test(metric, base)
        row.update(test or {})
        pooled.setdefault(tuple(row.get(k) for k in labels) + (row["metric"],), []).append((metric, base, test))
    tests = []
    for key, runs in pooled.items():
        test = runs[0][2] if len(runs) == 1 else paired_test(seed_mean([r[0] for r in runs]), seed_mean([r[1] for r in runs]))
        if test is not None:
            tests.append({**dict(zip(labels, key[:-1])), "metric": key[-1], **test})
    return tests


def describe(variant: dict, task: str, seed: int | None) -> str:
    shown = [f"r={variant['mask_rate']:g}" if "mask_rate" in variant else ""]
    shown += [f"{k}={v}" for k, v in variant.items() if k not in ("mask_rate", "mode", "me_layer")]
    return " ".join([task, *filter(None, shown)] + ([f"seed {seed}"] if seed is not None else []))
