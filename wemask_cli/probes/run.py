"""Every chosen probe measured against the unmodified model on the same prompts (`wemask probe`'s report).

The unmodified model is measured by `method.locate` (which also finds the ME layer, unless one is given); each
probe's model by the same statistics (`method.collect`), the diversity measures (`method.diversity`) and, per mask
rate, the same measurement with WeMask on top (`method.masked`). Per run: the first token's norm step at the ME
layer (its norm there over its norm entering it), its norm per layer, the attention-sink mass per layer, and where
the sink lands (the key position that receives the most attention: per layer the most common position over the
prompts, and the share of prompts there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from wemask_cli.method import locate as method
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.diversity import diversity_layers
from wemask_cli.method.masked import masked_run, mean_after
from wemask_cli.probes.base import Probe, ProbeContext, ProbeSettings
from wemask_cli.probes.registry import PROBES
from wemask_cli.runtime.errors import WeMaskError


def sink_positions(stats: method.PromptStats) -> tuple[list[int | None], list[float | None]]:
    """Per layer, the most common sink position over the prompts (None where no prompt has one) and its share."""
    positions, shares = [], []
    for column in stats.values["sink_position"].T:
        found = [int(v) for v in column.tolist() if v == v]  # NaN: a 1-token prompt
        top = Counter(found).most_common(1)
        positions.append(top[0][0] if top else None)
        shares.append(top[0][1] / len(found) if top else None)
    return positions, shares


def summary(stats: method.PromptStats, records: list[dict], me: int) -> dict:
    """One run's measures (the module docstring), from its statistics and layer records."""
    positions, shares = sink_positions(stats)
    later = [p for p in positions[me + 1 :] if p is not None]
    lands = Counter(later).most_common(1)
    return {
        "jump": records[me]["step"],
        "first_over_other": records[me]["first_over_other"],
        "first_norm": [r["first_norm"] for r in records],
        "mean_first_norm_after_me": mean_after(records, "first_norm", me),
        "sink_mass": [r["sink_mass"] for r in records],
        "mean_sink_mass_after_me": mean_after(records, "sink_mass", me),
        "sink_position": positions,
        "sink_position_share": shares,
        "sink_lands": lands[0][0] if lands else None,
        "sink_lands_layers": lands[0][1] / len(later) if lands else None,
        "located_me_layer": method.detect(stats).me_layer,
    }


def measured(model: nn.Module, ids: Sequence[Sequence[int]], me: int, mask_rates: Sequence[float], collect: dict,
             stats: method.PromptStats | None = None) -> dict:
    """One run on the model as it is (`stats`: already collected), its diversity and mask rates included."""
    if stats is None:
        stats = method.collect_stats(model, ids, **collect)
    records = method.layer_records(stats, resolve_layers(model))
    run = summary(stats, records, me)
    run["diversity"] = diversity_layers(model, ids, collect["batch_size"], collect["pad_id"])
    run["mask_rates"] = [masked_run(model, ids, me, rate, records, **collect) for rate in mask_rates]
    return run


def chosen_probes(names: Sequence[str] | None, context: ProbeContext) -> tuple[list[Probe], list[dict]]:
    """The probes asked for (each must apply), or every registered one, those that do not apply skipped with why;
    every probe's settings checked."""
    probes, skipped = [], []
    for probe in [PROBES.get(name)() for name in dict.fromkeys(names)] if names else [cls() for cls in PROBES.entries().values()]:
        try:
            probe.applies(context)
        except WeMaskError as err:
            if names:
                raise
            skipped.append({"probe": probe.name, "reason": str(err)})
            continue
        probe.check(context)
        probes.append(probe)
    return probes, skipped


def massive_direction(stats: method.PromptStats, me: int) -> torch.Tensor:
    """v: the unit mean direction of the first token's output at layer `me` over the prompts."""
    total = stats.unit_sum[me].float()
    return total / total.norm()


@dataclass
class Prepared:
    """The unmodified model's locate result, the probes' context, the probes that run and those skipped."""

    base: method.LocateResult
    context: ProbeContext
    probes: list[Probe]
    skipped: list[dict]
    me_source: str

    def passes(self, mask_rates: Sequence[float]) -> int:
        """How many passes over the prompts `measure` makes (what its progress counts)."""
        return len(mask_rates) + len(self.probes) * (1 + len(mask_rates))


def prepare(model: nn.Module, ids: Sequence[Sequence[int]], *, names: Sequence[str] | None = None,
            settings: ProbeSettings | None = None, me_layer: int | None = None, batch_size: int = 8,
            pad_id: int = 0) -> Prepared:
    """The unmodified model measured (and its ME layer located unless `me_layer` is given), and every check of the
    probes and their settings, before any probe runs."""
    parts = resolve_layers(model)
    base = method.locate(model, ids, batch_size=batch_size, pad_id=pad_id)
    me = me_layer if me_layer is not None else base.detection.me_layer
    if me is None:
        raise WeMaskError("no ME layer found on these prompts (wemask locate says why): give --me-layer N (0-based) to probe one")
    if not 0 <= me < len(parts):
        raise WeMaskError(f"--me-layer {me} is outside the model: it has {len(parts)} layers, use 0..{len(parts) - 1} (0-based)")
    context = ProbeContext(model, parts, me, settings or ProbeSettings(), massive_direction(base.stats, me), [len(row) for row in ids])
    probes, skipped = chosen_probes(names, context)
    return Prepared(base, context, probes, skipped, "--me-layer" if me_layer is not None else "located")


def measure(prepared: Prepared, ids: Sequence[Sequence[int]], *, mask_rates: Sequence[float] = (), batch_size: int = 8,
            pad_id: int = 0, progress: Callable[[int], None] | None = None) -> dict:
    """The unmodified run and each probe's, as a JSON-ready dict (keys: commands/probe.py)."""
    context, me = prepared.context, prepared.context.me_layer
    collect = dict(batch_size=batch_size, pad_id=pad_id, progress=progress)
    report = {
        "me_layer": me,
        "me_layer_source": prepared.me_source,
        "located_me_layer": prepared.base.detection.me_layer,
        "settings": {**asdict(context.settings), "mask_rates": list(mask_rates), "batch_size": batch_size},
        "unmodified": measured(context.model, ids, me, mask_rates, collect, prepared.base.stats),
        "probes": [],
        "skipped": prepared.skipped,
    }
    for probe in prepared.probes:
        with probe.applied(context) as details:
            run = measured(context.model, ids, me, mask_rates, collect)
        jump, plain = run["jump"], report["unmodified"]["jump"]
        run["jump_over_unmodified"] = jump / plain if jump is not None and plain else None
        report["probes"].append({"probe": probe.name, "summary": probe.summary, "details": details, **run})
    return report


def run_probes(model: nn.Module, ids: Sequence[Sequence[int]], *, names: Sequence[str] | None = None,
               settings: ProbeSettings | None = None, me_layer: int | None = None, mask_rates: Sequence[float] = (),
               batch_size: int = 8, pad_id: int = 0, progress: Callable[[int], None] | None = None) -> dict:
    """`prepare`, then `measure`."""
    prepared = prepare(model, ids, names=names, settings=settings, me_layer=me_layer, batch_size=batch_size, pad_id=pad_id)
    return measure(prepared, ids, mask_rates=mask_rates, batch_size=batch_size, pad_id=pad_id, progress=progress)
