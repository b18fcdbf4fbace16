"""Per-token metrics of SPEC section 2 as pure functions on tensors of a padded batch.

"First token" is each row's first real token (from the attention mask), so the numbers do not depend on the
padding side. Each function reduces a (B, T, ...) batch to one value per prompt (or per dim); NaN where a
metric is undefined (e.g. a 1-token prompt has no other tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SINK_RMS = 6.0


@dataclass(frozen=True)
class Tokens:
    """Which positions of a padded batch are real, and each row's first real position."""

    real: torch.Tensor  # (B, T) bool
    first: torch.Tensor  # (B,) long

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Tokens:
        real = attention_mask.bool()
        return cls(real=real, first=real.int().argmax(-1))

    @property
    def rest(self) -> torch.Tensor:
        """(B, T) bool: real tokens other than the first."""
        positions = torch.arange(self.real.shape[1], device=self.real.device)
        return self.real & (positions != self.first[:, None])


def first_value(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """values[b, first[b], ...] for each row b."""
    index = tokens.first.view(-1, *([1] * (values.dim() - 1))).expand(-1, 1, *values.shape[2:])
    return values.gather(1, index).squeeze(1)


def rest_mean(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """(B,) mean of (B, T) values over the non-first real tokens; NaN for a 1-token row."""
    rest = tokens.rest
    return torch.where(rest, values, 0).sum(-1) / rest.sum(-1)


def first_minus_rest(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    return first_value(values, tokens) - rest_mean(values, tokens)


def first_over_rest(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    return first_value(values, tokens) / rest_mean(values, tokens)


def frac_in_dims(h: torch.Tensor, dims: torch.Tensor) -> torch.Tensor:
    """Frac_t: the share of h_t's energy in `dims`."""
    energy = h.pow(2)
    return energy[..., dims].sum(-1) / energy.sum(-1)


def kl_to_scale(h: torch.Tensor, w_eff: torch.Tensor) -> torch.Tensor:
    """KL(p_t || g) with p_t = h_t^2 / sum h_t^2 and g = w_eff^2 / sum w_eff^2 (g clamped at 1e-12)."""
    p = h.pow(2) / h.pow(2).sum(-1, keepdim=True)
    g = (w_eff.pow(2) / w_eff.pow(2).sum()).clamp_min(1e-12)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, g)).sum(-1)


def concentration(v: torch.Tensor) -> torch.Tensor:
    """Inverse participation ratio C(v) = sum_i (v_i^2 / sum_j v_j^2)^2: 1/d when spread evenly, 1 on one dim."""
    q = v.pow(2) / v.pow(2).sum(-1, keepdim=True)
    return q.pow(2).sum(-1)


def sink_mass(weights: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """(B,) mean attention weight on the first real token, over heads and the real queries after it."""
    index = tokens.first.view(-1, 1, 1, 1).expand(-1, weights.shape[1], weights.shape[2], 1)
    on_first = weights.gather(3, index).squeeze(3).mean(1)  # (B, T queries)
    return rest_mean(on_first, tokens)


def sink_position(weights: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """(B,) the key position (counted from the first real token) that receives the most attention, averaged over
    heads and the real queries after the first token; NaN for a 1-token row."""
    received = torch.where(tokens.rest[:, None, :, None], weights, 0.0).sum(2).mean(1)  # (B, keys)
    received = torch.where(tokens.real, received, -1.0)
    position = (received.argmax(-1) - tokens.first).to(weights.dtype)
    return torch.where(tokens.rest.any(-1), position, math.nan)


def mean_pairwise_cosine(unit_sum: torch.Tensor, count: int) -> torch.Tensor:
    """Mean cosine over distinct pairs of `count` unit vectors from their sum: (|sum|^2 - n) / (n (n - 1))."""
    if count < 2:
        return torch.full(unit_sum.shape[:-1], math.nan)
    return (unit_sum.pow(2).sum(-1) - count) / (count * (count - 1))


def largest_activation(h: torch.Tensor, tokens: Tokens) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B,) largest |h| over real tokens, its token (counted from the first real token) and its dim."""
    magnitude = torch.where(tokens.real[..., None], h.abs(), -1.0).flatten(1)
    value, flat = magnitude.max(-1)
    token, dim = flat // h.shape[-1], flat % h.shape[-1]
    return value, token - tokens.first, dim


def sink_hits(h: torch.Tensor, mask: torch.Tensor, threshold: float = SINK_RMS) -> tuple[torch.Tensor, torch.Tensor]:
    """(d,) how many masked tokens have |h_i| >= threshold x RMS(h_t), and (d,) the sum of |h_i| / RMS(h_t)."""
    scaled = h.abs() / h.pow(2).mean(-1, keepdim=True).sqrt()
    scaled = scaled[mask]
    return (scaled >= threshold).sum(0), scaled.sum(0)
