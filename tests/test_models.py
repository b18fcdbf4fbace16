"""Model loading: sources, the atomic GGUF cache, dtype and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wemask_cli import WeMaskError
from wemask_cli.models.gguf_cache import atomic_directory, cache_dir
from wemask_cli.models.loading import load_model
from wemask_cli.models.sources import resolve_source


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "models" / "m"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "config.json").write_text("{}")
            raise RuntimeError("interrupted")
    assert not target.exists() and list((tmp_path / "models").iterdir()) == []
    with atomic_directory(target) as staging:
        (staging / "config.json").write_text("{}")
    assert (target / "config.json").is_file() and len(list((tmp_path / "models").iterdir())) == 1


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("WEMASK_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "wemask"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("./missing-dir", "no such directory"),
        ("/nowhere/model.gguf", "no such GGUF file"),
    ],
)
def test_bad_sources_are_one_clear_error(spec, message):
    with pytest.raises(WeMaskError, match=message):
        resolve_source(spec)


def test_file_and_non_model_directory_are_refused(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(WeMaskError, match="is a file, not a model directory"):
        resolve_source(str(tmp_path / "weights.bin"))
    with pytest.raises(WeMaskError, match="has no config.json or adapter_config.json"):
        resolve_source(str(tmp_path))
    assert resolve_source("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


def test_load_directory_with_dtype(tiny_model_dir):
    loaded = load_model(tiny_model_dir, dtype="bfloat16")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.tokenizer.pad_token is not None and loaded.source == tiny_model_dir
    with pytest.raises(WeMaskError, match="--dtype 'half' is not valid"):
        load_model(tiny_model_dir, dtype="half")


def test_quantization_kind_is_checked(tiny_model_dir):  # where bitsandbytes runs (CPU too): tests/test_qlora.py
    with pytest.raises(WeMaskError, match="quantization '3bit' is not valid"):
        load_model(tiny_model_dir, quantization="3bit")


@pytest.mark.embedded
def test_embedded_model_loads_from_the_converted_cache(embedded):
    assert embedded.source.endswith(tuple("0123456789abcdef")) and "SmolLM2-135M-Instruct" in embedded.source
    assert type(embedded.model).__name__ == "LlamaForCausalLM" and len(embedded.model.model.layers) == 30
    assert embedded.tokenizer.chat_template


def test_a_bad_gguf_is_one_line_with_a_spinner_while_converting(monkeypatch, capsys, tmp_path):
    import contextlib

    from conftest import run_main

    from wemask_cli.render.common import err_console

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    shown = []
    monkeypatch.setattr(err_console, "status", lambda text, **k: shown.append(text) or contextlib.nullcontext())
    junk = tmp_path / "junk.gguf"
    junk.write_text("not a GGUF file\n")
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(junk), "-p", "hi")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("wemask: error: could not convert junk.gguf (") and "GGUF magic" in err
    assert any(text.startswith("Converting junk.gguf") for text in shown)
    assert not (tmp_path / "cache").exists()  # nothing half-written in the cache


def test_corrupt_weights_are_one_clear_error(tiny_model_dir, tmp_path):
    from pathlib import Path

    for item in Path(tiny_model_dir).iterdir():
        if item.name != "model.safetensors":
            (tmp_path / item.name).symlink_to(item)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(WeMaskError, match=r"^could not load model .*\(.+\)"):
        load_model(str(tmp_path))


def test_first_line_of_an_error_is_its_first_line_cut_or_its_type():
    """errors.first_line serves every one-line error (models, data readers, checkpoints, recipes, TRL settings,
    lm-eval); once, checkpoints' copy raised IndexError on an exception with no message."""
    from wemask_cli.runtime.errors import first_line

    assert first_line(ValueError("  bad value\nsecond line")) == "bad value"
    assert first_line(OSError("x" * 500)) == "x" * 300 and first_line(OSError("abcdef"), 3) == "abc"
    assert first_line(OSError()) == "OSError" and first_line(RuntimeError(" \n ")) == "RuntimeError"


def write_entry(folder, weights: bool = True):
    """A folder the GGUF cache would accept: config.json, model.safetensors, tokenizer_config.json, tokenizer.json."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models

    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    Tokenizer(models.BPE()).save(str(folder / "tokenizer.json"))
    if weights:
        save_file({"w": torch.zeros(2)}, folder / "model.safetensors")
    return folder


def test_publishing_keeps_a_complete_entry_and_replaces_a_broken_one(tmp_path):
    from wemask_cli.models.gguf_cache import entry_problem, publish

    target = write_entry(tmp_path / "m")  # another node published first
    publish(write_entry(tmp_path / "staging-a"), target)
    assert entry_problem(target) is None and (tmp_path / "staging-a").exists()  # kept: the caller drops its staging
    broken = tmp_path / "b"
    write_entry(broken, weights=False)
    assert entry_problem(broken).startswith("model.safetensors is missing or unreadable")
    publish(write_entry(tmp_path / "staging-b"), broken)
    assert entry_problem(broken) is None and not (tmp_path / "staging-b").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "m", "staging-a"]  # nothing set aside is left


def test_a_half_converted_gguf_is_rebuilt_with_one_line(monkeypatch, capsys, tmp_path, tiny_gguf):
    """What a conversion on a rank other than 0 used to leave (tokenizer files only): every later load failed with
    '[Errno 39] Directory not empty'. Now the entry is checked and rebuilt, and says so once."""
    from conftest import run_main

    from wemask_cli.models.gguf_cache import entry_problem

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    entry = Path(resolve_source(tiny_gguf))
    assert entry_problem(entry) is None
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        (entry / name).unlink()
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_gguf, "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 0, err
    rebuilt = [line for line in err.splitlines() if "is incomplete" in line]
    assert rebuilt == [f"wemask: warning: the converted model in {entry} is incomplete (no readable config.json): converting tiny-llama.gguf again"]
    assert entry_problem(entry) is None and [p.name for p in entry.parent.iterdir()] == [entry.name]


def test_a_converted_gguf_saves_tied_weights_once(monkeypatch, tmp_path, tiny_gguf):
    from safetensors import safe_open

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    with safe_open(Path(resolve_source(tiny_gguf)) / "model.safetensors", "pt") as weights:
        names = set(weights.keys())
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    config = json.loads((Path(resolve_source(tiny_gguf)) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"  # as save_pretrained writes them
    model = load_model(tiny_gguf).model
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_a_garbage_tokenizer_in_a_converted_gguf_is_rebuilt_with_one_line(monkeypatch, capsys, tmp_path, tiny_gguf):
    from conftest import run_main

    from wemask_cli.models.gguf_cache import entry_problem

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    entry = Path(resolve_source(tiny_gguf))
    (entry / "tokenizer.json").write_text("garbage")
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_gguf, "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 0, err
    rebuilt = [line for line in err.splitlines() if "is incomplete" in line]
    assert rebuilt == [f"wemask: warning: the converted model in {entry} is incomplete (tokenizer.json is missing or unreadable "
                       "(expected value at line 1 column 1)): converting tiny-llama.gguf again"]
    assert entry_problem(entry) is None


def test_a_cache_that_is_a_file_is_one_line_before_converting(monkeypatch, capsys, tmp_path, tiny_gguf):
    import contextlib

    from conftest import run_main

    from wemask_cli.render.common import err_console

    shown = []
    monkeypatch.setattr(err_console, "status", lambda text, **k: shown.append(text) or contextlib.nullcontext())
    (tmp_path / "cache").write_text("not a folder")
    for cache in (tmp_path / "cache", tmp_path / "cache" / "below"):
        monkeypatch.setenv("WEMASK_CACHE", str(cache))
        code, _, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_gguf, "--prompt", "hi")
        assert code == 2 and err.count("\n") == 1 and not [text for text in shown if text.startswith("Converting")], err
        assert err.startswith(f"wemask: error: WEMASK_CACHE={cache}: {tmp_path / 'cache'} is a file, not a folder: set WEMASK_CACHE to a folder")


def test_a_converted_gguf_is_readable_as_the_umask_allows(monkeypatch, tmp_path, tiny_gguf):
    from wemask_cli.runtime.atomic import umask

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    entry = Path(resolve_source(tiny_gguf))
    assert entry.stat().st_mode & 0o777 == 0o777 & ~umask()
    modes = {item.name: oct(item.stat().st_mode & 0o777) for item in entry.iterdir()}
    assert modes == dict.fromkeys(modes, oct(0o666 & ~umask())) and "model.safetensors" in modes


def test_only_the_main_process_shows_the_conversion_bar(tmp_path, tiny_gguf):
    """A node's first process converts whatever its global rank (gguf_cache.py); on rank 2 of a launch it is silent."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "WEMASK_CACHE": str(tmp_path / "cache"), "RANK": "2", "LOCAL_RANK": "0"}  # as torchrun sets them
    done = subprocess.run([sys.executable, "-m", "wemask_cli", "locate", "--model", tiny_gguf], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and len(list((tmp_path / "cache" / "models").iterdir())) == 1, done.stderr[-2000:]
    assert "GGUF tensors" not in done.stderr and "%|" not in done.stderr, done.stderr[-2000:]


def test_a_gguf_conversion_writes_no_bar_into_a_log(monkeypatch, capfd, tmp_path, tiny_gguf):
    """`wemask infer --model x.gguf` with stderr a file, not a terminal: transformers' "Converting and de-quantizing
    GGUF tensors" bar would be one line of carriage returns there."""
    from conftest import run_main

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    code, _, err = run_main(monkeypatch, capfd, "infer", "--model", tiny_gguf, "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 0 and (Path(resolve_source(tiny_gguf)) / "config.json").is_file(), err
    assert "\r" not in err and "de-quantizing" not in err, err
