"""The engine extension point: an engine declared outside the package (tests/toy_engine.py) and installed as a plugin
(entry-point group `wemask.engines`) is an `--engine` choice, and runs `wemask infer` and every `wemask eval` task
with the transformers engine's outputs, with no edit inside wemask_cli; what it does not declare is refused in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from conftest import run_main
from plugin_support import plugin_site, wemask, wemask_each

from wemask_cli import resources
from wemask_cli.engines.base import ENGINES, Engine, EngineRequest
from wemask_cli.engines.transformers import TransformersEngine
from wemask_cli.interventions import config_from_dict, save_configs
from wemask_cli.mask_request.flags import MaskRequest
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.registry import RegistryError

MASK = ("--mask-rate", "0,1", "--me-layer", "1")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return plugin_site(tmp_path_factory.mktemp("engine-site"), "wemask.engines", "toy = toy_engine:ToyEngine")


def test_the_plugin_engine_is_an_engine_choice_without_torch(site):
    helped = wemask(site, "infer", "--help", blocked=True)
    assert helped.returncode == 0, helped.stderr
    listed = " ".join(word for word in helped.stdout.split() if word != "│")
    assert "| vllm (the same mask in vLLM; needs `pip install wemask-cli`) | toy (toy plugin: the transformers engine, wrapped)." in listed
    unknown = wemask(site, "infer", "--engine", "tox", "-p", "hi")
    assert unknown.returncode == 2 and unknown.stderr == "wemask: error: --engine 'tox' is unknown: use one of transformers, vllm, toy\n"


def test_infer_on_the_plugin_engine_equals_transformers(site, monkeypatch, capsys, tiny_model_dir, tmp_path):
    ask = ("infer", "--model", tiny_model_dir, "-p", "The quick brown fox", "-p", "What is 2 plus 2?", "--max-new-tokens", "6", *MASK)
    toy = wemask(site, *ask, "--engine", "toy", "-o", str(tmp_path / "toy.jsonl"))
    assert toy.returncode == 0, toy.stderr[-3000:]
    code, _, err = run_main(monkeypatch, capsys, *ask, "-o", str(tmp_path / "hf.jsonl"))
    assert code == 0, err
    toy_rows, hf_rows = ([json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()] for name in ("toy", "hf"))
    assert [r["engine"] for r in toy_rows] == ["toy"] * 4
    assert [{**r, "engine": "transformers"} for r in toy_rows] == hf_rows
    assert toy_rows[0]["completion"] != toy_rows[2]["completion"] or toy_rows[1]["completion"] != toy_rows[3]["completion"]


def lm_eval_flags(folder: Path) -> list[str]:
    """--lm-eval-tasks over a local YAML task on the bundled choice file."""
    with resources.as_file("eval/choice.jsonl") as choice:
        folder.mkdir(exist_ok=True)
        (folder / "toy_choice.yaml").write_text(
            "task: toy_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f"    test: {choice}\ntest_split: test\noutput_type: multiple_choice\n"
            'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
            "metric_list:\n  - metric: acc\n"
        )
    return ["--lm-eval-tasks", "toy_choice", "--lm-eval-include", str(folder)]


TASKS = {
    "perplexity": ["--task", "perplexity", "--window", "32"],
    "choice": ["--task", "choice"],
    "math": ["--task", "math", "--max-new-tokens", "4"],
    "refusal": ["--task", "refusal", "--max-new-tokens", "4"],
    "lm-eval": None,
}


def flat(row: dict) -> dict:
    """A result row with its lists (the paired interval) spread into keys, as pytest.approx compares them."""
    return {f"{key}[{i}]" if isinstance(value, list) else key: item for key, value in row.items()
            for i, item in (enumerate(value) if isinstance(value, list) else [(0, value)])}


def task_flags(task: str, folder: Path) -> list[str]:
    return ["eval", "--model", "MODEL", *(TASKS[task] or lm_eval_flags(folder / "tasks")), "--limit", "4", "--batch-size", "2", *MASK]


@pytest.fixture(scope="module")
def toy_evals(site, tiny_model_dir, tmp_path_factory) -> tuple[Path, dict]:
    """Every task on the toy engine, in one `wemask` process with the plugin installed: (folder, {task: (exit code,
    stderr)}); each task's metrics.json in folder/TASK."""
    folder = tmp_path_factory.mktemp("toy-evals")
    tasks = [task for task in TASKS if task != "lm-eval" or importlib.util.find_spec("lm_eval") is not None]
    asks = [[tiny_model_dir if word == "MODEL" else word for word in task_flags(task, folder)] for task in tasks]
    done = wemask_each(site, *([*ask, "--engine", "toy", "--output", str(folder / task)] for task, ask in zip(tasks, asks)))
    return folder, {task: (code, err) for task, (code, _, err) in zip(tasks, done)}


@pytest.mark.parametrize("task", list(TASKS))
def test_every_eval_task_runs_on_the_plugin_engine_as_on_transformers(task, toy_evals, monkeypatch, capsys, tiny_model_dir, tmp_path):
    if task == "lm-eval":
        pytest.importorskip("lm_eval")
    folder, done = toy_evals
    code, err = done[task]
    assert code == 0, err[-3000:]
    ask = [tiny_model_dir if word == "MODEL" else word for word in task_flags(task, folder)]
    code, _, err = run_main(monkeypatch, capsys, *ask, "--output", str(tmp_path / "hf"))
    assert code == 0, err
    toy_doc, hf_doc = (json.loads((path / "metrics.json").read_text()) for path in (folder / task, tmp_path / "hf"))
    assert toy_doc["engine"] == "toy" and toy_doc["provenance"]["versions"]["toy-engine"] == "0.1"
    assert len(toy_doc["results"]) == len(hf_doc["results"]) >= 2
    for ours, theirs in zip(toy_doc["results"], hf_doc["results"]):
        assert ours["engine"] == "toy" and flat({**ours, "engine": "transformers"}) == pytest.approx(flat(theirs), abs=1e-5)


def test_a_feature_the_plugin_engine_does_not_declare_is_refused_in_one_line(site, tiny_model_dir, tmp_path):
    refused = wemask(site, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--engine", "toy", "--quantize",
                     "none,w8a8", "--output", str(tmp_path / "out"), blocked=True)
    assert refused.returncode == 2 and refused.stderr == (
        "wemask: error: --quantize simulates quantization on the transformers model's weights: use --engine transformers\n"
    )
    assert not (tmp_path / "out").exists()


def test_an_engine_is_checked_against_the_base_and_its_declared_features():
    with pytest.raises(RegistryError, match="is registered as an engine but is not an Engine$"):
        ENGINES.register(type("Stray", (), {"name": "stray"}))
    with pytest.raises(RegistryError, match=r"the engine 'warp' declares unknown features \['teleport'\]"):
        ENGINES.register(type("Warp", (Engine,), {"name": "warp", "supports": frozenset({"teleport"})}))
    assert "warp" not in ENGINES and "stray" not in ENGINES


def test_an_engine_refuses_massive_tokens_adapters_and_remedies_it_does_not_declare(tiny_model_dir, tmp_path):
    plain = type("Plain", (TransformersEngine,), {"name": "plain", "supports": frozenset()})
    massive = MaskRequest.parse(mask_rate="0.3", me_layer="1", tokens="massive")
    with pytest.raises(WeMaskError, match=r"^--tokens massive picks tokens .* the plain engine does not see: use --engine transformers$"):
        plain.load(EngineRequest(tiny_model_dir, mask=massive))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": tiny_model_dir}))
    with pytest.raises(WeMaskError, match=rf"^{adapter} is a LoRA adapter folder, which the plain engine does not load"):
        plain.load(EngineRequest(str(adapter), mask=MaskRequest.parse()))
    remedied = tmp_path / "remedied"
    save_configs(remedied, [config_from_dict({"kind": "pre_affine"})], weights={"pre_affine.0.attn.scale": torch.ones(4)})
    (remedied / "config.json").write_text((Path(tiny_model_dir) / "config.json").read_text())
    with pytest.raises(WeMaskError, match=r"carries saved interventions \(pre_affine\) that the plain engine does not run"):
        plain.load(EngineRequest(str(remedied), mask=MaskRequest.parse()))
