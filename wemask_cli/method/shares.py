"""Batches split among several workers, each batch whole on one of them: `Shares` says which batches run here and
brings the parts together. A part keeps what order changes (a float sum over the prompts) batch by batch, so that its
`merge` adds the batches in the order one worker would: the joined statistics are those of one run, to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Shares:
    """`runs(k)`: whether batch k (of collect.batches) runs here; `gather(part)`: every worker's part, this one's
    included, the same list on every worker. A part is joined by its own class: `type(part).merge(parts)`."""

    runs: Callable[[int], bool]
    gather: Callable[[object], list]

    def join(self, part, progress: Callable[[int], None] | None = None, others: int = 0):
        """The whole from every worker's part; `progress(others)` counts the prompts measured elsewhere."""
        whole = type(part).merge(self.gather(part))
        if progress is not None and others:
            progress(others)
        return whole
