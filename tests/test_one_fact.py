"""Facts kept once: one atomic write (one line on failure, still an OSError), one rank-0 rule, one list of libraries."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime import atomic, progress, ranks, versions
from wemask_cli.runtime.errors import WeMaskError

ROOT = Path(__file__).resolve().parents[1]


def test_every_atomic_write_fails_in_one_line_that_is_still_an_os_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(WeMaskError, match=r"^could not write .*a-file/run/wemask_config.json: ") as caught:
        WeMaskConfig().save(blocker / "run")  # method/ writes through the same function as outputs/
    assert isinstance(caught.value, OSError) and caught.value.errno in (errno.ENOTDIR, errno.EEXIST)
    with pytest.raises(OSError):  # a caller that tolerates an unwritable cache keeps catching it
        atomic.atomic_write_text(blocker / "cache.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]


def test_one_rank_rule_for_speaking_and_for_collectives(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a single-node launcher that sets only LOCAL_RANK
    progress.say("hello")
    assert (ranks.rank(), ranks.is_main_process(), capsys.readouterr().err) == (1, False, "")
    monkeypatch.setenv("RANK", "0")  # the global rank decides (node 0's first process; LOCAL_RANK is per node)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (ranks.rank(), ranks.is_main_process()) == (0, True)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "0")  # node 1's first process: not the main one
    assert (ranks.rank(), progress.is_main_process()) == (3, False)


def test_every_record_lists_libraries_from_the_one_list():
    for named in (versions.EVAL_LIBRARIES, versions.RUN_LIBRARIES, versions.ENV_LIBRARIES, versions.TESTED_LIBRARIES):
        assert [versions.LIBRARIES.index(name) for name in named] == sorted(versions.LIBRARIES.index(name) for name in named)
    assert set(versions.TESTED_LIBRARIES) | {"wemask-cli", "huggingface_hub", "safetensors"} == set(versions.LIBRARIES)
    from wemask_cli.compat import notices

    assert set(notices.PACKAGES) == {versions.import_name(name) for name in versions.LIBRARIES}


def test_no_second_list_of_libraries_beside_runtime_versions():
    """A literal naming three or more of the libraries (by distribution or import name) outside runtime/versions.py
    is a second list that drifts (compat/notices.py once kept its own)."""
    import ast

    names = set(versions.LIBRARIES) | {versions.import_name(name) for name in versions.LIBRARIES}
    found = []
    for path in sorted((ROOT / "wemask_cli").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() == "wemask_cli/runtime/versions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                if len(named) >= 3:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {named}")
    assert found == [], found


def test_a_full_disk_while_wemask_writes_a_checkpoint_names_the_checkpoint_to_resume_from(monkeypatch, capsys, tmp_path, tiny_model_dir):
    from conftest import run_main

    real_replace = atomic.os.replace

    def replace(source, target):  # the disk fills while wemask writes step 2's run record (atomic_write_text)
        if "checkpoint-2" in str(target) and str(target).endswith("wemask_run.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(source, target)

    monkeypatch.setattr(atomic.os, "replace", replace)
    data = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", data, "-o", str(tmp_path / "full"),
                            "--max-steps", "3", "--save-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64",
                            "--report-to", "none")
    assert code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("wemask: error: training stopped at step 2: could not write to ")
    assert err.strip().endswith(": no space left on the device; the last complete checkpoint is checkpoint-1: make room and continue with "
                                f"--resume ({tmp_path / 'full'} is kept: nothing in it was deleted)")
