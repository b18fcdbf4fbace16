"""A model folder that ships its own code (an auto_map in config.json) runs it only with --trust-remote-code:
`yes | wemask infer` never answers transformers' prompt for it. Subprocesses, as a user runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIGURATION = """
from pathlib import Path
from transformers import LlamaConfig
Path(MARKS, "RAN-configuration").write_text("ran")

class RemoteConfig(LlamaConfig):
    model_type = "wemask_remote_llama"
"""
MODELING = """
from pathlib import Path
from transformers import LlamaForCausalLM
from .configuration_remote import RemoteConfig
Path(MARKS, "RAN-modeling").write_text("ran")

class RemoteForCausalLM(LlamaForCausalLM):
    config_class = RemoteConfig
"""


@pytest.fixture
def remote_model(tmp_path, tiny_model_dir) -> Path:
    folder = tmp_path / "remote"
    shutil.copytree(tiny_model_dir, folder)
    marks = f"MARKS = {str(tmp_path)!r}\n"  # the code says where it ran, wherever transformers copies it
    (folder / "configuration_remote.py").write_text(marks + CONFIGURATION)
    (folder / "modeling_remote.py").write_text(marks + MODELING)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="wemask_remote_llama", architectures=["RemoteForCausalLM"], auto_map={
        "AutoConfig": "configuration_remote.RemoteConfig", "AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def wemask(*args, stdin: str = "", cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wemask_cli", *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def ran(folder: Path) -> list[str]:
    """The marker files the model's code writes when imported."""
    return sorted(p.name for p in folder.parent.glob("RAN-*"))


def test_remote_code_runs_only_with_the_flag_whatever_stdin_says(remote_model, tmp_path):
    done = wemask("infer", "--model", str(remote_model), "--prompt", "hi", "--max-new-tokens", "2", stdin="y\n" * 50, cwd=tmp_path)
    assert done.returncode == 2 and ran(remote_model) == [], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"wemask: error: --model {remote_model} ships its own Python code")
    assert "--trust-remote-code" in done.stderr.strip().splitlines()[-1]

    done = wemask("infer", "--model", str(remote_model), "--prompt", "hi", "--max-new-tokens", "2", "--trust-remote-code", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ran(remote_model) and "--trust-remote-code: running the Python code" in done.stderr


def with_auto_map(folder: Path, file: str, auto_map: dict, **fields) -> Path:
    """`folder` with an auto_map (and `fields`) added to its config.json or tokenizer_config.json."""
    settings = json.loads((folder / file).read_text())
    (folder / file).write_text(json.dumps({**settings, **fields, "auto_map": auto_map}))
    return folder


def test_code_beside_a_built_in_model_type_is_named_as_not_used(remote_model, tmp_path):
    config = json.loads((remote_model / "config.json").read_text())
    with_auto_map(remote_model, "config.json", {"AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"},
                  model_type="llama", architectures=["LlamaForCausalLM"])
    assert config["model_type"] != "llama"
    done = wemask("infer", "--model", str(remote_model), "--prompt", "hi", "--max-new-tokens", "2", cwd=tmp_path)
    assert done.returncode == 0 and ran(remote_model) == [], done.stderr[-2000:]
    assert (f"wemask: warning: --model {remote_model} ships its own Python code (an auto_map in its config.json), which "
            "is not used: loaded with transformers' built-in LlamaForCausalLM") in done.stderr


def test_code_in_the_tokenizer_config_is_refused_naming_that_file(tmp_path, tiny_model_dir):
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "tokenizer-code"))
    (folder / "tokenization_remote.py").write_text(f"from pathlib import Path\nPath({str(tmp_path)!r}, 'RAN-tokenizer').write_text('ran')\n")
    with_auto_map(folder, "tokenizer_config.json", {"AutoTokenizer": ["tokenization_remote.RemoteTokenizer", None]},
                  tokenizer_class="RemoteTokenizer")
    done = wemask("infer", "--model", str(folder), "--prompt", "hi", "--max-new-tokens", "2", cwd=tmp_path)
    assert done.returncode == 2 and ran(folder) == [], done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"wemask: error: --model {folder} ships its own Python code (an auto_map in its tokenizer_config.json), which")


def test_the_refusal_of_code_is_the_only_line(remote_model, tmp_path):
    done = wemask("infer", "--model", str(remote_model), "--prompt", "hi", "--max-new-tokens", "2", cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if "real_accelerator" not in line and line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "ships its own Python code" in lines[0], done.stderr[-2000:]
