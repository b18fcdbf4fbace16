"""An unreachable hub is one quick check and one line, never a minute of retries and a traceback."""

from __future__ import annotations

import huggingface_hub.constants
import pytest
from conftest import run_main

from wemask_cli.runtime import hub


@pytest.fixture
def unreachable_hub(monkeypatch):
    """The hub out of reach; the offline switch is undone after the test."""
    import datasets.config

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    yield
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def one_warning_then_one_error(err: str, warning: str, error: str) -> None:
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "Retrying" not in err, err
    assert lines[-2].startswith("wemask: warning: ") and warning in lines[-2], err
    assert lines[-1].startswith("wemask: error: ") and error in lines[-1], err


def test_a_hub_model_id_offline(monkeypatch, capsys, unreachable_hub):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", "nobody/no-such-model", "-p", "hi")
    assert code == 2
    one_warning_then_one_error(err, "the Hugging Face Hub is not reachable, so only cached copies are used",
                               "could not load model 'nobody/no-such-model'")
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True  # the libraries already imported went offline too


def test_a_hub_dataset_offline(monkeypatch, capsys, tmp_path, tiny_model_dir, unreachable_hub):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", "nobody/no-such-data",
                            "-o", str(tmp_path / "o"), "--max-steps", "1")
    assert code == 2
    one_warning_then_one_error(err, "the Hugging Face Hub is not reachable", "'nobody/no-such-data' could not be loaded")


def test_an_lm_eval_task_whose_dataset_cannot_be_fetched(monkeypatch, capsys, tmp_path, tiny_model_dir, unreachable_hub):
    pytest.importorskip("lm_eval")
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--lm-eval-tasks", "arc_easy",
                            "--limit", "2", "-o", str(tmp_path / "e"))
    assert code == 2
    one_warning_then_one_error(err, "the Hugging Face Hub is not reachable",
                               "--lm-eval-tasks arc_easy: its data could not be loaded")


def test_hf_hub_offline_is_respected_without_a_check(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "hub_reachable", lambda: pytest.fail("no network check when HF_HUB_OFFLINE is set"))
    hub.before_hub_fetch("--model x/y")


def test_the_revision_an_eval_records_is_the_cached_snapshots_commit(tmp_path, monkeypatch):
    """transformers 5 dropped the config's `_commit_hash` (eval's revision was then always null, silently): the
    commit is read from the hub cache's snapshot folder instead."""
    repo = tmp_path / "models--org--name"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert hub.snapshot_revision("org/name") == "abc123"
    assert hub.snapshot_revision("org/other") is None and hub.snapshot_revision(str(tmp_path)) is None
    assert hub.snapshot_revision("not a hub id!") is None
