"""The lock `.wemask.lock` of a claimed folder: created with O_EXCL (pid, host, command, start time, token); a
second claimant is refused naming the running command; a lock whose process is gone (same host), or whose pid is
not a valid one, is explained and taken over. Torch-free."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from wemask_cli.outputs.manifest import LOCK_NAME
from wemask_cli.runtime.atomic import describe_os_error
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import warn

UNREADABLE_LOCK_GRACE_S = 60.0  # a lock file still empty after this long was torn by a killed process
MAX_PID = 2**31 - 1  # what os.kill accepts (a C int); larger numbers raise OverflowError


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _started_after_lock(pid: int, started) -> bool:
    """Whether process `pid` started (Linux /proc) clearly after the lock's `started` time: another process that got
    the pid of the run that wrote the lock. False when either time is unknown."""
    try:
        locked = datetime.strptime(str(started), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22: start time
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > locked + 2


def _not_wemask(pid: int, lock_path: Path) -> str:
    """A hint when the live process `pid` does not look like a wemask command (Linux /proc): '' otherwise."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
    if not command or "wemask" in command:
        return ""
    return f"; pid {pid} is now `{command[:80]}`, which is not wemask: if the locking run is gone, delete {lock_path}"


def _describe(lock: dict) -> str:
    command = lock.get("command") or lock.get("kind") or "a wemask command"
    return f"`{command}` (pid {lock.get('pid')} on {lock.get('host')}, started {lock.get('started')})"


def take_lock(folder: Path, kind: str) -> tuple[Path, str]:
    """Create the lock with O_EXCL; explain and replace a stale one; refuse a live one. Returns (path, token)."""
    lock_path = folder / LOCK_NAME
    token = uuid.uuid4().hex
    content = json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(), "kind": kind, "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "token": token,
    })
    for _ in range(3):
        if _create(lock_path, content):
            return lock_path, token
        with _takeover(folder):  # one process at a time judges a lock and replaces a stale one
            _judge_existing_lock(lock_path)  # raises for a live lock; removes a stale one
            if _create(lock_path, content):
                return lock_path, token
    raise WeMaskError(f"{folder} is being claimed by another command at the same moment: try again")


def _create(lock_path: Path, content: str) -> bool:
    """Create the lock with O_EXCL (False: one is there already)."""
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError as err:
        raise WeMaskError(f"could not claim {lock_path.parent}: {describe_os_error(err)}") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    return True


@contextlib.contextmanager
def _takeover(folder: Path):
    """An exclusive flock on the folder itself while a lock is judged and a stale one replaced: two commands finding
    the same dead lock cannot both take it over (the second then finds the first's live lock)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _judge_existing_lock(lock_path: Path) -> None:
    """A lock already there: refuse when its run may be alive; explain and remove it when it is not."""
    try:
        lock = json.loads(lock_path.read_text())
        if not isinstance(lock, dict):
            raise ValueError
    except FileNotFoundError:
        return  # released meanwhile
    except (OSError, ValueError):
        age = time.time() - lock_path.stat().st_mtime if lock_path.exists() else 0
        if age < UNREADABLE_LOCK_GRACE_S:
            raise WeMaskError(f"{lock_path.parent} is being claimed by another wemask command: wait for it, or use another folder") from None
        warn(f"{lock_path.parent}: removing an unreadable lock left by a killed command ({LOCK_NAME}, {age:.0f} s old)")
        remove_quietly(lock_path)
        return
    pid = lock.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        warn(f"{lock_path.parent} holds a lock with no valid process id ({pid!r}): it cannot belong to a running "
             "command; taking the folder over; its files are kept")
        remove_quietly(lock_path)
        return
    same_host = lock.get("host") == socket.gethostname()
    if same_host and _pid_alive(pid) and _started_after_lock(pid, lock.get("started")):
        warn(f"{lock_path.parent} was locked by {_describe(lock)}; pid {pid} is now a process started after that lock "
             "(the pid was reused): the locking run is gone; taking the folder over; its files are kept")
        remove_quietly(lock_path)
        return
    if same_host and not _pid_alive(pid):
        warn(
            f"{lock_path.parent} was locked by {_describe(lock)}, which is no longer running (killed or crashed): "
            "taking the folder over; its files are kept"
        )
        remove_quietly(lock_path)
        return
    where = f"; if that run is gone, delete {lock_path}" if not same_host else _not_wemask(pid, lock_path)
    raise WeMaskError(f"{lock_path.parent} is in use by {_describe(lock)}: wait for it to finish or choose another folder{where}")


def running_command(folder: Path) -> str | None:
    """The command whose live lock `folder` holds, described as a refusal names it; None without a lock or when its
    process is gone (same host; a lock from another host counts as live, as when claiming)."""
    try:
        lock = json.loads((folder / LOCK_NAME).read_text())
    except (OSError, ValueError):
        return None
    pid = lock.get("pid") if isinstance(lock, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        return None
    if lock.get("host") == socket.gethostname() and (not _pid_alive(pid) or _started_after_lock(pid, lock.get("started"))):
        return None
    return _describe(lock)


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
