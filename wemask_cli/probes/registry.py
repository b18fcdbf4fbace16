"""The registry of probes: `wemask probe --probe NAME`, torch-free until a probe's module is imported.

Adding a probe = one module with a registered `Probe` subclass (probes/base.py): a module of this package listed in
BUILTIN, or any installed module named under the entry-point group `wemask.probes` (pyproject:
`[project.entry-points."wemask.probes"] my_probe = "my_pkg.my_probe"`), imported the first time the probes are read.
"""

from __future__ import annotations

from wemask_cli.probes.base import Probe
from wemask_cli.runtime.registry import Registry

BUILTIN = ("permute_norm", "uniform_norm", "zero_ffn", "down_svd", "patch", "swap_layers")  # modules, in report order

PROBES: Registry[type[Probe]] = Registry("probe", "wemask.probes", Probe, package=__package__, builtin=BUILTIN, flag="--probe")
register = PROBES.register  # class decorator
