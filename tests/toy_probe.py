"""A toy probe declared outside the package, as a third-party one would be (tests/test_probe.py installs it through
the `wemask.probes` entry point): the first token's output at the ME layer halved."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from wemask_cli.probes.base import Probe
from wemask_cli.probes.edits import hidden_of, hooked, tracked, with_hidden
from wemask_cli.probes.registry import register


@register
class HalveFirst(Probe):
    name = "halve-first"
    summary = "the first token's output at the ME layer halved"

    @contextmanager
    def applied(self, context):
        positions, tracking = tracked(context.part.layer)

        def halve(_module, _args, out):
            hidden = hidden_of(out)
            return with_hidden(out, torch.where(positions.first.unsqueeze(-1), hidden / 2, hidden))

        with hooked(tracking, context.part.layer.register_forward_hook(halve)):
            yield {"factor": 0.5}
