"""Batches of token sequences: padding to one width on either side, the position ids of a padded batch, and the pad
token a tokenizer uses."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) padded on `side`."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[b, span] = torch.tensor(row, dtype=torch.long)
        mask[b, span] = 1
    return ids, mask


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted over real tokens only (0 at each row's first real token; pads get 0 and are masked)."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


def pad_id_of(tokenizer) -> int:
    """The tokenizer's pad token, else its EOS (pads are masked out, so any id works), else 0."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
