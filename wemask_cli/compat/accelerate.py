"""accelerate's internals wemask touches: FSDP on the CPU (train/fsdp.py). Verified on accelerate 1.16.

accelerate switches a run to FSDP only for GPU-type process groups (AcceleratorState.__init__, in accelerate/state.py:
the `distributed_type not in [MULTI_CPU, ...]` branch), and there is no public way to ask for FSDP on a MULTI_CPU
(gloo) run: passing `Accelerator(fsdp_plugin=...)` or ACCELERATE_USE_FSDP is ignored there. So wemask writes the
FSDP type and plugin into the state accelerate shares between its objects (`_shared_state`, a class-level dict every
AcceleratorState and PartialState reads), then checks that a fresh AcceleratorState reads FSDP back.
"""

from __future__ import annotations

from wemask_cli.compat import incompatible, require

LIBRARY = "accelerate"
VERIFIED = {LIBRARY: ("1.16", "1.16")}  # the release series this module was verified on


def shared_states():
    """(AcceleratorState._shared_state, PartialState._shared_state, DistributedType.FSDP), each checked."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    return (require(LIBRARY, AcceleratorState, "_shared_state", kind=dict, verified=VERIFIED),
            require(LIBRARY, PartialState, "_shared_state", kind=dict, verified=VERIFIED),
            require(LIBRARY, DistributedType, "FSDP", verified=VERIFIED))


def check() -> None:
    """What `force_fsdp` relies on is there (the canary in tests/test_compat.py calls this)."""
    shared_states()


def force_fsdp(plugin) -> None:
    """Make this process's accelerate state FSDP with `plugin` (after an Accelerator initialised it), so the trainer's
    Accelerator prepares the model with `fully_shard`; a CompatError when accelerate does not read it back."""
    from accelerate.state import AcceleratorState

    accelerator_state, partial_state, fsdp = shared_states()
    accelerator_state.update(distributed_type=fsdp, fsdp_plugin=plugin)
    partial_state["distributed_type"] = fsdp  # AcceleratorState copies it from PartialState on every init
    state = AcceleratorState()
    if state.distributed_type != fsdp or state.fsdp_plugin is not plugin:
        raise incompatible(LIBRARY, "AcceleratorState no longer reads FSDP from its shared state on the CPU", VERIFIED)
