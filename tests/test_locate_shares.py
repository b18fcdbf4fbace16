"""Locate's statistics measured in parts (method/shares.py: each worker some of the batches, the parts joined) are
one run's bit for bit: per-prompt values, the running sums (added in batch order), an MoE layer's first-token
experts, the diversity measures and the massive-token norms (a repeated prompt's from its last batch). Two workers
are played one after the other in this process; tests/test_data_parallel.py runs `wemask locate` in 2 processes."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model

from wemask_cli.method import locate as method
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.diversity import collect_diversity
from wemask_cli.method.massive_tokens import recording
from wemask_cli.method.shares import Shares

PROMPTS = [[5, 17, 42, 9, 33], [11, 12, 99, 4, 8, 61, 70, 3, 2], [77], [40, 40, 40, 40], [7, 8, 9], [5, 17, 42, 9, 33],
           [21, 22, 23, 24, 25, 26, 27]]  # fmt: skip


def in_two(measure):
    """`measure(shares)` as two workers run it (batch k on worker k % 2): worker 1, then worker 0, whose n-th gather
    gets its part and worker 1's n-th; worker 0's result."""
    parts = {0: [], 1: []}

    def worker(r: int) -> Shares:
        def gather(part):
            parts[r].append(part)
            return [part, parts[1][len(parts[0]) - 1]] if r == 0 else [part]

        return Shares(lambda k: k % 2 == r, gather)

    measure(worker(1))
    return measure(worker(0))


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("arch", ["llama", "qwen2_moe"])
def test_two_parts_join_into_one_runs_statistics(arch):
    model = make_tiny_model(arch)

    def stats_and_norms(shares):
        with recording(model, PROMPTS, shares and shares.runs) as norms:
            stats = method.collect_stats(model, PROMPTS, batch_size=2, shares=shares)
        return stats, (shares.join(norms) if shares else norms).norms

    (one, one_norms), (two, two_norms) = stats_and_norms(None), in_two(stats_and_norms)
    for name, values in one.values.items():
        assert identical(two.values[name], values), name
    for name in ("input_first_norm", "lengths", "degenerate", "unit_sum", "sink_count", "sink_scale"):
        assert identical(getattr(two, name), getattr(one, name)), name
    assert two.other_tokens == one.other_tokens and sorted(two.first_experts) == sorted(one.first_experts)
    assert all(identical(two.first_experts[layer], experts) for layer, experts in one.first_experts.items())
    assert (arch == "qwen2_moe") == bool(one.first_experts)
    assert all(identical(b, a) for a, b in zip(one_norms, two_norms, strict=True))
    parts = resolve_layers(model)
    assert method.layer_records(two, parts) == method.layer_records(one, parts)
    alone = collect_diversity(model, PROMPTS, batch_size=2).values
    joined = in_two(lambda shares: collect_diversity(model, PROMPTS, batch_size=2, shares=shares)).values
    assert all(identical(joined[name], values) for name, values in alone.items())


def test_a_worker_without_a_batch_joins_too():
    """Fewer batches than workers: worker 1 measures nothing, worker 0 everything."""
    model = make_tiny_model("llama")
    one = method.collect_stats(model, PROMPTS[:2], batch_size=2)
    two = in_two(lambda shares: method.collect_stats(model, PROMPTS[:2], batch_size=2, shares=shares))
    assert identical(two.unit_sum, one.unit_sum) and identical(two.values["first_norm"], one.values["first_norm"])
