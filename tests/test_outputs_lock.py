"""The lock of an output folder: taking over a dead run's lock is atomic (many processes racing, one wins), and a
pid that was reused by a later process is recognised as a dead run."""

from __future__ import annotations

import json
import multiprocessing
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wemask_cli.outputs import LOCK_NAME
from wemask_cli.outputs.lock import take_lock
from wemask_cli.runtime.errors import WeMaskError


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


TRIALS, RACERS = 25, 6


def contend(folders: list[str], barrier, results) -> None:
    """One racer: for each folder, wait until every racer is ready, then try to take its lock (a won lock stays
    live: this process runs until every trial is done)."""
    for i, folder in enumerate(folders):
        barrier.wait()
        try:
            take_lock(Path(folder), "sft")
            results.put((i, "won"))
        except WeMaskError:
            results.put((i, "refused"))
    barrier.wait()


def test_only_one_of_many_racers_takes_over_a_dead_lock(tmp_path):
    lock = {"pid": dead_pid(), "host": socket.gethostname(), "command": "wemask sft -o run", "started": "2026-01-01T00:00:00+0000"}
    folders = [tmp_path / f"run{i}" for i in range(TRIALS)]
    for folder in folders:
        folder.mkdir()
        (folder / LOCK_NAME).write_text(json.dumps(lock))
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=contend, args=([str(f) for f in folders], barrier, results)) for _ in range(RACERS)]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _ in range(TRIALS * RACERS)]
    for racer in racers:
        racer.join(timeout=60)
    winners = [sum(1 for i, what in outcomes if i == trial and what == "won") for trial in range(TRIALS)]
    assert winners == [1] * TRIALS, winners


def test_a_lock_whose_pid_now_belongs_to_a_later_process_is_taken_over(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    # a live process whose command line names wemask, whatever runs the tests (make's sh, a terminal, CI)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "wemask", "sft"])
    try:
        lock = {"pid": live.pid, "host": socket.gethostname(), "command": "wemask sft -o run", "started": "2030-01-01T00:00:00+0000"}
        (folder / LOCK_NAME).write_text(json.dumps(lock))
        with pytest.raises(WeMaskError, match="is in use by `wemask sft -o run`"):  # started before the lock: may be the run
            take_lock(folder, "sft")
        lock["started"] = "2000-01-01T00:00:00+0000"  # the process with that pid started after the lock was written
        (folder / LOCK_NAME).write_text(json.dumps(lock))
        take_lock(folder, "sft")
    finally:
        live.kill()
        live.wait()
    assert "the pid was reused" in capsys.readouterr().err


def test_a_manifest_write_torn_by_sigkill_does_not_block_the_next_run(tmp_path, capsys):
    """SIGKILL during a manifest save left .wemask-manifest.json.XXXX.tmp: the next run refused the folder as the user's."""
    from wemask_cli.outputs import MANIFEST_NAME, claim_output_dir

    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / MANIFEST_NAME).write_text(json.dumps({"version": 2, "written": [], "files": {}, "dirs": []}))
    (folder / f".{MANIFEST_NAME}.k1ll3d.tmp").write_text("{\"vers")
    lock = {"pid": dead_pid(), "host": socket.gethostname(), "command": "wemask eval", "started": "2026-01-01T00:00:00+0000"}
    (folder / LOCK_NAME).write_text(json.dumps(lock))
    with claim_output_dir(folder, overwrite=False, kind="eval", flag="--output"):
        pass
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST_NAME] and "no longer running" in capsys.readouterr().err


def test_a_lock_held_by_a_live_process_that_is_not_wemask_gives_the_way_out(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
    deadline = time.monotonic() + 10
    while b"sleep" not in cmdline.read_bytes() and time.monotonic() < deadline:  # until the child has exec'd
        time.sleep(0.01)
    try:
        lock = {"pid": sleeper.pid, "host": socket.gethostname(), "command": "wemask sft -o run", "started": "2030-01-01T00:00:00+0000"}
        (folder / LOCK_NAME).write_text(json.dumps(lock))
        with pytest.raises(WeMaskError, match=rf"pid {sleeper.pid} is now `sleep 30`, which is not wemask: .* delete .*{LOCK_NAME}"):
            take_lock(folder, "sft")
    finally:
        sleeper.kill()
        sleeper.wait()
