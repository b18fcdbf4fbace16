"""Expected failures (bad files, no network) are one line; anything else (a bug) propagates as itself, and the CLI
prints it as a traceback followed by a line asking for a bug report."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import datasets
import pytest
import transformers
from conftest import run_main

from wemask_cli.cli import BUG_REPORT
from wemask_cli.data.folders import load_folder
from wemask_cli.data.readers import load_file, load_hub
from wemask_cli.models.gguf_cache import converted_gguf_dir
from wemask_cli.models.loading import load_model
from wemask_cli.runtime.errors import WeMaskError


def planted(*args, **kwargs):
    raise TypeError("planted bug")


def copy_model(source: str, target: Path) -> Path:
    """A copy of a model directory (links, except for the files a test rewrites)."""
    target.mkdir()
    for item in Path(source).iterdir():
        (target / item.name).symlink_to(item)
    return target


def replace(path: Path, text: str) -> None:
    path.unlink()
    path.write_text(text)


# The CLI entry point


def test_a_bug_surfaces_as_a_traceback_then_a_line_asking_for_a_report(monkeypatch, capsys):
    import wemask_cli.runtime.versions

    monkeypatch.setattr(wemask_cli.runtime.versions, "library_versions", planted)
    with pytest.raises(TypeError, match="planted bug") as info:
        run_main(monkeypatch, capsys, "env")
    printed = traceback.format_exception(info.value)
    assert printed[0].startswith("Traceback") and printed[-1].strip() == BUG_REPORT
    assert "please report it" in BUG_REPORT


# models.py: GGUF conversion and load_model


def test_a_bug_while_converting_a_gguf_is_not_called_a_bad_file(monkeypatch, tmp_path):
    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", planted)
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 64)
    with pytest.raises(TypeError, match="planted bug"):
        converted_gguf_dir(tmp_path / "m.gguf")


def test_a_truncated_gguf_is_one_clear_error(monkeypatch, tmp_path):
    from wemask_cli.models.gguf_cache import embedded_gguf_path

    monkeypatch.setenv("WEMASK_CACHE", str(tmp_path / "cache"))
    with embedded_gguf_path().open("rb") as stream:
        (tmp_path / "cut.gguf").write_bytes(stream.read(1000))  # ends inside the metadata: gguf-py's struct.error
    with pytest.raises(WeMaskError, match=r"^could not convert cut.gguf \(unpack_from requires"):
        converted_gguf_dir(tmp_path / "cut.gguf")


@pytest.mark.parametrize("loader", ["AutoTokenizer", "AutoModelForCausalLM"])
def test_a_bug_while_loading_a_model_is_not_called_a_network_problem(monkeypatch, tiny_model_dir, loader):
    monkeypatch.setattr(getattr(transformers, loader), "from_pretrained", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_model(tiny_model_dir)


def test_a_runtime_error_other_than_a_size_mismatch_propagates(monkeypatch, tiny_model_dir):
    def broken(*args, **kwargs):
        raise RuntimeError("planted torch failure")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", broken)
    with pytest.raises(RuntimeError, match="planted torch failure"):
        load_model(tiny_model_dir)


def test_bad_model_files_are_one_clear_error(tiny_model_dir, tmp_path):
    config = json.loads((Path(tiny_model_dir) / "config.json").read_text())
    cases = {
        "no-weights": lambda d: (d / "model.safetensors").unlink(),  # OSError
        "bad-tokenizer": lambda d: replace(d / "tokenizer.json", json.dumps({"model": {"type": "BPE"}})),  # KeyError
        "unknown-type": lambda d: replace(d / "config.json", json.dumps({**config, "model_type": "nosuch"})),  # ValueError
        "mismatch": lambda d: replace(d / "config.json", json.dumps({**config, "hidden_size": 128})),  # RuntimeError
    }
    for name, spoil in cases.items():
        directory = copy_model(tiny_model_dir, tmp_path / name)
        spoil(directory)
        with pytest.raises(WeMaskError, match=r"^could not load model .*\(.+\)"):
            load_model(str(directory))


# data/readers.py


def test_a_bug_while_building_rows_propagates_and_a_clash_is_one_line(monkeypatch, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "n": 1}\n{"prompt": "b", "n": 100000000000000000000000}\n')
    with pytest.raises(WeMaskError, match="rows do not share one layout"):  # pyarrow's OverflowError
        load_file(path, None, "--data")
    monkeypatch.setattr(datasets.Dataset, "from_dict", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_file(path, None, "--data")


def test_a_bug_while_reading_parquet_propagates_and_a_corrupt_file_is_one_line(monkeypatch, tmp_path):
    good = tmp_path / "good.parquet"
    datasets.Dataset.from_dict({"text": [f"row {i} " * 50 for i in range(2000)]}).to_parquet(str(good))
    data = good.read_bytes()
    middle = len(data) // 3
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(data[:100] + b"\x13" * middle + data[100 + middle :])  # footer intact, pages garbage
    with pytest.raises(WeMaskError, match=r"corrupt.parquet could not be read as parquet \((?!An error occurred)"):
        load_file(corrupt, None, "--data")  # the wrapped cause is named, not datasets' "An error occurred..."
    monkeypatch.setattr(datasets.Dataset, "from_parquet", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_file(good, None, "--data")


def test_a_bug_while_loading_from_the_hub_propagates_and_no_network_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeMaskError, match="could not be loaded from the hub"):
        load_hub("nobody/no-such-dataset", None, None, "--dataset")
    monkeypatch.setattr(datasets, "load_dataset", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_hub("nobody/no-such-dataset", None, None, "--dataset")


# data/folders.py


def test_a_bug_while_reading_a_saved_dataset_propagates_and_missing_files_are_one_line(monkeypatch, tmp_path):
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"prompt": ["a", "b"]}).save_to_disk(str(saved))
    for arrow in saved.glob("*.arrow"):
        arrow.unlink()
    with pytest.raises(WeMaskError, match="could not be read as a saved dataset"):
        load_folder(saved, None, "--data")
    monkeypatch.setattr(datasets, "load_from_disk", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_folder(saved, None, "--data")


def test_a_corrupt_dataset_dict_json_is_one_line(tmp_path):
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"prompt": ["a"]})}).save_to_disk(str(saved))
    (saved / "dataset_dict.json").write_text("{not json")
    with pytest.raises(WeMaskError, match=r"dataset_dict.json is not a saved DatasetDict's"):
        load_folder(saved, None, "--data")


def test_a_bug_while_joining_files_propagates_and_a_layout_clash_is_one_line(monkeypatch, tmp_path):
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "train-0.jsonl").write_text('{"prompt": "a", "n": "x"}\n')
    (folder / "train-1.jsonl").write_text('{"prompt": "b", "n": 1}\n')
    with pytest.raises(WeMaskError, match="files do not share one layout"):
        load_folder(folder, None, "--data")
    monkeypatch.setattr(datasets, "concatenate_datasets", planted)
    with pytest.raises(TypeError, match="planted bug"):
        load_folder(folder, None, "--data")
