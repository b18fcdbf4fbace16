"""--me-layer auto's cache: an entry wemask did not write for this model (edited by hand, torn, out of range) is
ignored with one warning naming its file, and the model is located again."""

from __future__ import annotations

import json

import pytest
from conftest import run_main

from wemask_cli.mask_request.me_layer_cache import FAST_PROMPTS, cache_key, entry_check
from wemask_cli.models.loading import load_model
from wemask_cli.prompts.rendering import encode
from wemask_cli.runtime.cache_dir import cache_dir


@pytest.fixture(scope="module")
def cache_file(tiny_model_dir):
    loaded = load_model(tiny_model_dir, dtype="float32")
    key = cache_key(loaded, encode(loaded.tokenizer, list(FAST_PROMPTS), max_length=128))
    return cache_dir() / "locate" / f"{key}.json", key


@pytest.mark.parametrize("entry", [{"me_layer": 999}, {"me_layer": "11"}, {"me_layer": -1}, {"me_layer": True},
                                   {"me_layer": [1, 2]}, {"me_layer": 1}, "not json", {"me_layer": 1, "check": "0" * 16}])
def test_a_bad_cache_entry_is_ignored_with_a_warning_and_relocated(entry, cache_file, tiny_model_dir, monkeypatch, capsys):
    path, key = cache_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(entry if isinstance(entry, str) else json.dumps(entry))
    args = ("infer", "--model", tiny_model_dir, "-p", "hi", "--max-new-tokens", "2", "--mask-rate", "0.3")
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and "Traceback" not in err, err
    assert f"wemask: warning: --me-layer auto: ignoring the locate cache entry {path}" in err, err
    assert err.strip().splitlines()[-1].startswith("wemask: error: --me-layer auto: no ME layer found")  # located again
    record = json.loads(path.read_text())
    assert record["me_layer"] is None and record["check"] == entry_check(key, None)
    code, _, err = run_main(monkeypatch, capsys, *args)  # the entry wemask wrote is used without a word
    assert code == 2 and "ignoring the locate cache" not in err
