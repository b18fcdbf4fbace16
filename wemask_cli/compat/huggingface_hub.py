"""huggingface_hub's internals wemask touches: going offline after import (runtime/hub.py). Verified on huggingface_hub
2.4.

huggingface_hub reads HF_HUB_OFFLINE once, when `huggingface_hub.constants` is imported, into the module constant
of the same name, which its functions read at call time; there is no public setter. Once the module is imported,
wemask sets that constant too (the environment variable covers a later import).
"""

from __future__ import annotations

import sys

from wemask_cli.compat import require

LIBRARY = "huggingface_hub"
VERIFIED = {LIBRARY: ("2.4", "2.4")}  # the release series this module was verified on
CONSTANTS = "huggingface_hub.constants"


def check(module=None) -> None:
    """The constant is there (`module`: huggingface_hub.constants, imported when not given; the canary calls this)."""
    if module is None:
        import huggingface_hub.constants as module
    require(LIBRARY, module, "HF_HUB_OFFLINE", kind=bool, verified=VERIFIED)


def go_offline() -> None:
    """HF_HUB_OFFLINE inside an already imported huggingface_hub (nothing to do before it is imported)."""
    module = sys.modules.get(CONSTANTS)
    if module is not None:
        check(module)
        module.HF_HUB_OFFLINE = True
