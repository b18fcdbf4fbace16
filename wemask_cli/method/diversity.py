"""Diversity of token representations and attention per layer (SPEC section 6), one value per prompt and layer.

Over each prompt's real tokens (padding excluded) of a layer's output, with the first token included (`<name>`) and
excluded (`<name>_rest`):
- `cosine`: the mean cosine similarity over distinct token pairs (1 when every token points one way);
- `effective_rank`: exp(-Σ p_k log p_k), p_k = σ_k / Σσ, σ the singular values of the centred token matrix;
- `participation_ratio`: (Σλ)² / Σλ², λ_k = σ_k²;
- `attention_entropy`: -Σ_j A_ij log A_ij per query row i of the layer's attention, averaged over heads and real
  query rows. Excluded: the query rows after the first token, each renormalised over the keys after it (the
  entropy of what a query reads besides the sink).
`sink_mass` (metrics.sink_mass) sits beside them. NaN where a value is undefined (one token; no spread to centre).
Prompts stream through the decoder in padded batches with eager attention (collect.run_batches), and hooks
reduce each layer at once, so memory does not grow with the number of prompts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from wemask_cli.method.arch import LayerParts, resolve_layers
from wemask_cli.method.collect import run_batches
from wemask_cli.method.metrics import Tokens, sink_mass
from wemask_cli.method.shares import Shares

MEASURES = ("cosine", "effective_rank", "participation_ratio", "attention_entropy")
NAMES = (*(name + suffix for name in MEASURES for suffix in ("", "_rest")), "sink_mass")


def mean_cosine(h: torch.Tensor) -> float:
    """The mean of cos(h_i, h_j) over distinct pairs of the rows of `h` (n, d); NaN for fewer than two rows."""
    n = h.shape[0]
    if n < 2:
        return math.nan
    unit = h.double() / h.double().norm(dim=-1, keepdim=True)
    return float((unit.sum(0).pow(2).sum() - n) / (n * (n - 1)))


def spectrum(h: torch.Tensor) -> tuple[float, float]:
    """(effective rank, participation ratio) of the rows of `h` (n, d) centred; NaN when nothing is left to spread."""
    if h.shape[0] < 2:
        return math.nan, math.nan
    centred = h.double() - h.double().mean(0, keepdim=True)
    sigma = torch.linalg.svdvals(centred)
    if sigma.sum() <= 1e-12 * max(1.0, float(h.double().abs().max())):
        return math.nan, math.nan
    p = sigma / sigma.sum()
    lam = sigma.pow(2)
    return float(torch.exp(-torch.special.xlogy(p, p).sum())), float(lam.sum().pow(2) / lam.pow(2).sum())


def attention_entropy(weights: torch.Tensor) -> tuple[float, float]:
    """(all, after the first token) mean entropy of one prompt's attention rows `weights` (heads, n, n) over its real
    tokens; after the first: query rows 1.., renormalised over keys 1.. (a row with no mass left is skipped)."""
    weights = weights.double()
    whole = float(-torch.special.xlogy(weights, weights).sum(-1).mean())
    rest = weights[:, 1:, 1:]
    total = rest.sum(-1, keepdim=True)
    kept = total.squeeze(-1) > 0
    if not bool(kept.any()):
        return whole, math.nan
    rest = rest / total.clamp_min(1e-300)
    return whole, float(-torch.special.xlogy(rest, rest).sum(-1)[kept].mean())


def hidden_measures(h: torch.Tensor) -> dict[str, float]:
    """The hidden-state measures of one prompt's real tokens `h` (n, d), with and without the first token."""
    values = {}
    for suffix, rows in (("", h), ("_rest", h[1:])):
        values["cosine" + suffix] = mean_cosine(rows)
        values["effective_rank" + suffix], values["participation_ratio" + suffix] = spectrum(rows)
    return values


@dataclass
class DiversityStats:
    """name (NAMES) -> (prompts, layers) float64 values; `rows`: the prompts measured."""

    values: dict[str, torch.Tensor]
    rows: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, prompts: int, layers: int) -> DiversityStats:
        return cls({name: torch.full((prompts, layers), math.nan, dtype=torch.float64) for name in NAMES})

    @classmethod
    def merge(cls, parts: list[DiversityStats]) -> DiversityStats:
        """All the prompts' values from parts that measured some of them each (every prompt from its own part)."""
        merged = cls.empty(*parts[0].values[NAMES[0]].shape)
        for part in parts:
            rows = torch.tensor(part.rows, dtype=torch.long)
            for name, values in part.values.items():
                merged.values[name][rows] = values[rows]
            merged.rows += part.rows
        return merged


class DiversityRecorder:
    """Forward hooks on every layer's output and attention that reduce one batch at a time into a DiversityStats."""

    def __init__(self, parts: Sequence[LayerParts], stats: DiversityStats):
        self.parts, self.stats = parts, stats
        self.rows: list[int] = []
        self.tokens: Tokens | None = None

    @contextmanager
    def installed(self) -> Iterator[DiversityRecorder]:
        handles = []
        for part in self.parts:
            l = part.index
            handles.append(part.attention.register_forward_hook(lambda _m, _i, out, l=l: self.on_attention(l, out)))
            handles.append(part.layer.register_forward_hook(lambda _m, _i, out, l=l: self.on_output(l, out)))
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def on_attention(self, l: int, out) -> None:
        weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
            return
        weights = weights.detach().float()
        self.stats.values["sink_mass"][self.rows, l] = sink_mass(weights, self.tokens).double().cpu()
        for b, row in enumerate(self.rows):
            real = self.tokens.real[b]
            whole, rest = attention_entropy(weights[b][:, real][:, :, real])
            self.stats.values["attention_entropy"][row, l] = whole
            self.stats.values["attention_entropy_rest"][row, l] = rest

    def on_output(self, l: int, out) -> None:
        h = (out[0] if isinstance(out, tuple) else out).detach()
        for b, row in enumerate(self.rows):
            for name, value in hidden_measures(h[b][self.tokens.real[b]]).items():
                self.stats.values[name][row, l] = value


@torch.no_grad()
def collect_diversity(model: nn.Module, token_ids: Sequence[Sequence[int]], *, batch_size: int = 8, pad_id: int = 0,
                      padding_side: str = "right", progress: Callable[[int], None] | None = None,
                      shares: Shares | None = None) -> DiversityStats:
    """Stream the prompts (lists of token ids, each non-empty) through the decoder, with whatever hooks the model
    carries (a WeMask mask included); return every measure per prompt and layer (with `shares`: this worker's
    batches, joined with the others')."""
    parts = resolve_layers(model)
    stats = DiversityStats.empty(len(token_ids), len(parts))
    recorder = DiversityRecorder(parts, stats)

    def start(_k: int, rows: list[int], mask: torch.Tensor) -> None:
        recorder.rows, recorder.tokens = list(rows), Tokens.from_mask(mask)
        stats.rows += rows

    with recorder.installed():
        ran = run_batches(model, token_ids, start, batch_size=batch_size, pad_id=pad_id, padding_side=padding_side,
                          progress=progress, runs=shares and shares.runs)
    return stats if shares is None else shares.join(stats, progress, len(token_ids) - ran)


def diversity_layers(model: nn.Module, token_ids: Sequence[Sequence[int]], batch_size: int, pad_id: int,
                     shares: Shares | None = None) -> list[dict]:
    """Per layer, each measure (NAMES) averaged over the prompts where it is defined (None where none is)."""
    from wemask_cli.method.locate import plain

    values = collect_diversity(model, token_ids, batch_size=batch_size, pad_id=pad_id, shares=shares).values
    layers = next(iter(values.values())).shape[1]
    return [{"layer": l, **{name: plain(values[name][:, l].nanmean()) for name in NAMES}} for l in range(layers)]
