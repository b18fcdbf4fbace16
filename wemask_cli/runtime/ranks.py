"""Several processes started by a launcher (torchrun, accelerate launch): who is main, waiting for one another,
one answer for all, and one error line for all. Without a launcher (WORLD_SIZE unset or 1) every helper is a no-op.

Torch only when a launcher started this process; `wemask --help` never imports torch from here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta

ERROR_KEY = "wemask/error"  # the main process's fatal error, on the launcher's key-value store
DONE_KEY = "wemask/done"  # set by the main process when a main-only command ends
LAUNCHER_PRECISION_ENV = "ACCELERATE_MIXED_PRECISION"  # set by accelerate launch in every process it starts
SAME_ERROR_WAIT_S = 5.0  # how long another rank waits to learn whether the main process failed the same way
_commands = 0  # main-only commands run so far in this process


def launcher() -> str:
    """Who started the processes: accelerate launch, torchrun, or nobody (a single process)."""
    if LAUNCHER_PRECISION_ENV in os.environ:
        return "accelerate launch"
    if "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "torchrun"
    return "single process"


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's global rank: torch.distributed's once a process group is up (without importing torch), else
    the launcher's RANK (torchrun, accelerate launch, deepspeed), else LOCAL_RANK (a single-node launcher that sets
    only that), else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))


def is_main_process() -> bool:
    """Rank 0: the process that speaks and writes for a launched run (every process is, without a launcher)."""
    return rank() == 0


def launched() -> bool:
    """True when a launcher started several processes."""
    return world_size() > 1


def group_ready() -> bool:
    """The default process group is up (the trainer's, or one joined with `join_group`)."""
    if not launched():
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def join_group() -> None:
    """Join the launcher's process group (gloo on the CPU, NCCL on GPUs) through accelerate, as the trainers do."""
    if launched() and not group_ready():
        import torch
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())


def barrier() -> None:
    if group_ready():
        import torch.distributed as dist

        dist.barrier()


def from_main(decide: Callable[[], object]):
    """`decide()` on the main process, its answer sent to every process; an error it raises (a WeMaskError) is
    raised on every process, so none waits for an answer that never comes."""
    from wemask_cli.runtime.errors import WeMaskError

    if not group_ready():
        return decide()
    import torch.distributed as dist

    message = [None, None]
    if rank() == 0:
        try:
            message[0] = decide()
        except WeMaskError as err:
            message[1] = str(err)
    dist.broadcast_object_list(message, src=0)
    if message[1] is not None:
        raise WeMaskError(message[1])
    return message[0]


def gather(value) -> list:
    """Every process's `value`, in rank order (just [value] without a process group)."""
    if not group_ready():
        return [value]
    import torch.distributed as dist

    values = [None] * world_size()
    dist.all_gather_object(values, value)
    return values


def runs_batch(k: int) -> bool:
    """Whether batch k of a data-parallel run is this process's: batch k runs on rank k % world_size (every batch
    without a process group)."""
    return not group_ready() or k % world_size() == rank()


def map_batches(count: int, batch_size: int, run: Callable[[int, int, int], list],
                advance: Callable[[int], None] | None = None) -> list:
    """`run(k, start, end)` (the results of items start..end-1) for every batch k of `count` items in batches of
    `batch_size`, the results in item order. In a process group, batch k runs on rank k % world_size and every
    process gets every result: each batch holds the items a single process would put in it, so what depends on a
    batch's composition (padding, a batch's seed) is the same."""
    done = {}
    for k, start in enumerate(range(0, count, batch_size)):
        if runs_batch(k):
            end = min(start + batch_size, count)
            done[k] = run(k, start, end)
            if advance:
                advance(end - start)
    if not group_ready():
        return [item for k in sorted(done) for item in done[k]]
    merged = {}
    for part in gather(done):
        merged.update(part)
    if advance:
        advance(count - sum(len(items) for items in done.values()))  # the other processes' items
    return [item for k in sorted(merged) for item in merged[k]]


def batch_shares():
    """Under a launcher, this process's batches (`runs_batch`) and the gather that joins them with the other
    processes' (a method.shares.Shares, for locate's and the diversity task's statistics); None in one process."""
    if not group_ready():
        return None
    from wemask_cli.method.shares import Shares

    return Shares(runs_batch, gather)


def _store(timeout_s: float):
    """A client of the launcher's key-value store (torchrun's agent store), or None when there is none."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true" or "MASTER_PORT" not in os.environ:
        return None
    import torch.distributed as dist

    try:
        return dist.TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]), is_master=False,
            timeout=timedelta(seconds=timeout_s), wait_for_workers=False,
        )
    except (RuntimeError, ValueError):  # the launcher is gone
        return None


def _key(name: str) -> str:
    return f"{name}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def error_line(message: str) -> str | None:
    """The line this process prints for a fatal user error: the main process's as is; another rank's only when the
    main process did not fail with the same message (else None: it is printed once, by the main process), prefixed
    with the rank."""
    if not launched():
        return f"wemask: error: {message}"
    store = _store(SAME_ERROR_WAIT_S)
    if rank() == 0:
        if store is not None:
            store.set(_key(ERROR_KEY), message)
        return f"wemask: error: {message}"
    if store is not None:
        try:
            store.wait([_key(ERROR_KEY)], timedelta(seconds=SAME_ERROR_WAIT_S))
            if store.get(_key(ERROR_KEY)).decode() == message:
                return None
        except (RuntimeError, ValueError):  # the main process did not fail (in time), or the launcher is gone
            pass
    return f"wemask: error: rank {rank()}: {message}"


def peer_lost(err: BaseException) -> bool:
    """A collective failed because another process of the run stopped (its own error is printed by it)."""
    text = str(err)
    return group_ready() and any(s in text for s in ("Connection closed by peer", "Connection reset by peer", "Broken pipe"))


def main_only(command: Callable) -> Callable:
    """Run a command on the main process only; under a launcher the other processes wait until it has ended (on the
    launcher's store, so a long run is no collective timeout) and write nothing."""
    import functools

    @functools.wraps(command)
    def run(*args, **kwargs):
        if not launched():
            return command(*args, **kwargs)
        store = _store(timeout_s=7 * 24 * 3600)
        if store is None:  # a launcher without torchrun's store (MPI, SLURM env only): a process-group barrier
            join_group()
            return _main_only_with_barrier(command, args, kwargs)
        global _commands
        _commands += 1  # one key per command run in this process (every rank counts alike)
        done = _key(f"{DONE_KEY}/{_commands}")
        if rank() != 0:
            store.wait([done])
            if store.get(done) != b"ok":
                raise SystemExit(2)  # the main process failed and said why
            return None
        outcome = "failed"
        try:
            result = command(*args, **kwargs)
            outcome = "ok"
            return result
        finally:
            store.set(done, outcome)

    return run


def _main_only_with_barrier(command: Callable, args, kwargs):
    if rank() != 0:
        barrier()
        return None
    try:
        return command(*args, **kwargs)
    finally:
        barrier()
