"""datasets' internals wemask touches. Verified on datasets 5.2.

- A Dataset's `_fingerprint` (its cache identity, which datasets has no public accessor for): read for eval's
  provenance (eval/data.py), and renamed for TRL's precomputed-reference cache, which hashes the dataset and the
  weights but not the mask (train/reference.py).
- Going offline after import (runtime/hub.py): `datasets.config` reads HF_HUB_OFFLINE (and the older HF_DATASETS_OFFLINE)
  once at import into module constants, which its loaders read at call time.
"""

from __future__ import annotations

import sys

from wemask_cli.compat import require

LIBRARY = "datasets"
VERIFIED = {LIBRARY: ("5.2", "5.2")}  # the release series this module was verified on
CONFIG = "datasets.config"
OFFLINE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def is_dataset(value) -> bool:
    """`value` is a datasets.Dataset (False without importing datasets when it was never imported)."""
    return "datasets" in sys.modules and isinstance(value, sys.modules["datasets"].Dataset)


def fingerprint(dataset) -> str | None:
    """A Dataset's fingerprint (None for anything else)."""
    if not is_dataset(dataset):
        return None
    return require(LIBRARY, dataset, "_fingerprint", kind=str, verified=VERIFIED)


def set_fingerprint(dataset, value: str) -> None:
    """Give a Dataset another cache identity (the data are unchanged)."""
    fingerprint(dataset)  # checked first
    dataset._fingerprint = value


def check(config=None) -> None:
    """What this module reads and writes is there (`config`: datasets.config, imported when not given; the canary in
    tests/test_compat.py calls this)."""
    if config is None:
        import datasets
        import datasets.config as config

        fingerprint(datasets.Dataset.from_dict({"text": ["a"]}))
    for name in OFFLINE:
        require(LIBRARY, config, name, kind=bool, verified=VERIFIED)


def go_offline() -> None:
    """datasets' offline constants set inside an already imported datasets (nothing to do before it is imported)."""
    config = sys.modules.get(CONFIG)
    if config is not None:
        check(config)
        for name in OFFLINE:
            setattr(config, name, True)
