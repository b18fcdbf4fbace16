"""A command stopped from outside: SIGTERM unwinds (no lock left, an empty folder it created removed, exit 143);
after SIGKILL (the out-of-memory killer) the next run names the dead lock and takes it over. Real subprocesses."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from wemask_cli.outputs import LOCK_NAME

ROOT = Path(__file__).resolve().parents[1]
PPL_TEXT = str(ROOT / "wemask_cli" / "resources" / "eval" / "perplexity.txt")


def started_eval(model: str, out: Path) -> subprocess.Popen:
    """`wemask eval` into `out`, returned once it holds the folder's lock (it is then loading the model)."""
    cmd = [sys.executable, "-m", "wemask_cli", "eval", "--model", model, "--task", "perplexity", "--data", PPL_TEXT,
           "--limit", "2", "--window", "16", "--output", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / LOCK_NAME).exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    return proc


def test_sigterm_leaves_no_lock_and_no_folder_it_created(tmp_path, tiny_model_dir):
    out = tmp_path / "new" / "eval"
    proc = started_eval(tiny_model_dir, out)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "wemask: terminated (SIGTERM)" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_after_sigkill_the_next_run_names_the_dead_lock_and_takes_it_over(tmp_path, tiny_model_dir):
    out = tmp_path / "eval"
    proc = started_eval(tiny_model_dir, out)
    proc.kill()
    proc.wait(timeout=60)
    assert (out / LOCK_NAME).exists()
    again = started_eval(tiny_model_dir, out)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "was locked by `" in err and f"(pid {proc.pid} " in err and "no longer running" in err, err
    assert (out / "metrics.json").is_file() and not (out / LOCK_NAME).exists()


def test_a_killed_runs_folder_holding_nothing_is_removed_when_the_next_run_fails(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """The out-of-memory killer stopped `wemask sft` before it wrote anything: the folder held only its lock. A next
    run that takes it over and then fails (a bad row) left that folder behind, empty."""
    from conftest import run_main

    out, data = tmp_path / "run", ROOT / "data" / "sft_chat.jsonl"
    cmd = [sys.executable, "-m", "wemask_cli", "sft", "--model", tiny_model_dir, "--dataset", str(data), "-o", str(out),
           "--max-steps", "1", "--report-to", "none"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / LOCK_NAME).exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.kill()
    proc.wait(timeout=60)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n{not json\n')
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", str(bad), "-o", str(out), "--report-to", "none")
    assert code == 2 and "line 2 is not valid JSON" in err and "no longer running" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
