"""The built wheel works on its own: installed outside the checkout, `wemask locate` and `wemask eval` run with
their defaults (the bundled prompts and eval sets ship inside the package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(tmp_path: Path) -> Path:
    """`pip wheel` from a copy of the sources (so nothing is written into the checkout), without network."""
    source = tmp_path / "source"
    shutil.copytree(ROOT / "wemask_cli", source / "wemask_cli", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", source, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("wemask_cli-*.whl")
    return wheel


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new virtualenv holding only the wheel; torch & co. resolve through a .pth line naming this
    environment's site-packages (a plain path entry: its editable-install .pth files are not processed)."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    return venv


@pytest.mark.embedded
def test_the_wheel_runs_locate_and_eval_outside_the_checkout(tmp_path, embedded_dir):
    wheel = build_wheel(tmp_path)
    venv = fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"

    probe = "import json, sys, wemask_cli; print(json.dumps([wemask_cli.__file__, sys.path]))"
    package_file, path = json.loads(run(venv / "bin" / "python", "-c", probe, cwd=elsewhere, env=env).stdout)
    assert package_file.startswith(str(venv)), package_file  # the wheel's copy, not the checkout's
    assert ROOT not in [(elsewhere / entry).resolve() for entry in path]

    wemask = venv / "bin" / "wemask"
    run(wemask, "locate", "--json", "locate.json", cwd=elsewhere, env=env)
    report = json.loads((elsewhere / "locate.json").read_text())
    assert report["me_layer"] == 11 and len(report["prompts"]) == 16  # the bundled prompt set

    run(wemask, "eval", "--task", "perplexity", "--limit", "2", "-o", "ppl", cwd=elsewhere, env=env)
    metrics = json.loads((elsewhere / "ppl" / "metrics.json").read_text())
    assert metrics["task"] == "perplexity" and "perplexity.txt" in json.dumps(metrics)  # the bundled set
