"""Every extension point on the one Registry, and a task's own flags: a task from another package (tests/toy_flag_task.py,
installed only as an entry point) declares `--toy-max-new`, which `wemask eval --help` lists (without torch) and
`wemask eval --task toy-flag --toy-max-new N` hands to it; another task refuses it. Tasks, interventions and
quantization schemes (entry-point group `wemask.quantization`) follow the same rules: a duplicate name names both
sources, a plugin cannot replace a built-in, an entry is checked against its base class. eval/settings.py imports no
task (the cycle settings -> tasks -> lm_eval -> settings is gone)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plugin_support import plugin_site, plugins_site, wemask

from wemask_cli.eval.quantize.schemes import SCHEMES, Scheme
from wemask_cli.eval.quantize.schemes import register as register_scheme
from wemask_cli.eval.tasks import Task, TaskFlag
from wemask_cli.eval.tasks.registry import TASKS
from wemask_cli.interventions.registry import KINDS
from wemask_cli.runtime.registry import RegistryError


@pytest.fixture
def site(tmp_path):
    return plugin_site(tmp_path / "site", "wemask.eval_tasks", "toy-flag = toy_flag_task")


def test_a_plugin_tasks_own_flag_is_in_help_without_torch(site):
    listed = wemask(site, "eval", "--help", blocked=True)
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.replace("│", " ").split())
    assert "--toy-max-new <int> toy-flag: new tokens per completion at most (toy plugin's own flag)." in text, text
    assert "refusal (share of completions" in text and "toy-flag (toy plugin: mean completion length" in text
    assert text.index("--lm-eval-include <str>") < text.index("--toy-max-new <int>") < text.index("--output")
    assert "--toy-max-new" not in wemask(None, "eval", "--help", blocked=True).stdout


def test_a_plugin_tasks_own_flag_reaches_it_and_is_recorded(site, tmp_path, tiny_model_dir):
    out = tmp_path / "toy"
    done = wemask(site, "eval", "--model", tiny_model_dir, "--task", "toy-flag", "--toy-max-new", "2", "--limit", "2",
                  "-r", "0", "--output", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "toy-flag" and metrics["settings"]["options"] == {"toy_max_new": 2}
    records = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert [record["max_new"] for record in records] == [2, 2], records


def test_another_task_refuses_a_plugin_tasks_flag(site):
    done = wemask(site, "eval", "--task", "perplexity", "--toy-max-new", "2", blocked=True)
    assert done.returncode == 2 and done.stderr == "wemask: error: --toy-max-new applies to the toy-flag task, not to perplexity\n", done.stderr


def test_a_task_option_is_checked_when_it_registers():
    TASKS.entries()
    with TASKS.restoring():
        lm_eval = r"wemask_cli\.eval\.tasks\.lm_eval\.LmEvalTask \(built-in\)"
        with pytest.raises(RegistryError, match=f"declares the option --lm-eval-tasks, which is already {lm_eval}"):
            TASKS.register(type("Copy", (Task,), {"name": "copy", "options": (TaskFlag("lm_eval_tasks", str, "again"),)}))
        with pytest.raises(RegistryError, match="declares the option --window, which is already a shared eval flag"):
            TASKS.register(type("Windowed", (Task,), {"name": "windowed", "options": (TaskFlag("window", int, "mine"),)}))
        with pytest.raises(RegistryError, match="declares the option --limit, which is already a shared eval flag"):
            TASKS.register(type("Limited", (Task,), {"name": "limited", "options": (TaskFlag("limit", int, "mine"),)}))
        with pytest.raises(RegistryError, match="a task's option is a TaskFlag of type str, int, float or bool"):
            TASKS.register(type("Listy", (Task,), {"name": "listy", "options": (TaskFlag("toy_list", list, "lists"),)}))
        assert "copy" not in TASKS and "windowed" not in TASKS and "listy" not in TASKS


@pytest.mark.parametrize("registry, what", [(TASKS, "an eval task but is not a Task"),
                                            (KINDS, "an intervention but is not an Intervention"),
                                            (SCHEMES, "a quantization scheme but is not a Scheme")])
def test_every_extension_point_checks_its_base_class(registry, what):
    stray = type("Stray", (), {"name": "stray", "kind": "stray"})
    with pytest.raises(RegistryError, match=f"Stray is registered as {what}$"):
        registry.register(stray)
    assert "stray" not in registry


def test_a_duplicate_scheme_names_both_sources_and_a_plugin_cannot_replace_a_builtin(tmp_path):
    with SCHEMES.restoring():
        with pytest.raises(RegistryError, match=r"test_eval_task_flags\.w8a8 registers the quantization scheme 'w8a8', "
                                                r"which is already wemask_cli\.eval\.quantize\.schemes\.w8a8 \(built-in\)$"):
            register_scheme(Scheme("w8a8", None, None, "an impostor", module=__name__))
        assert SCHEMES.get("w8a8").description == "INT8 weights and inputs"
    impostor = "from wemask_cli.eval.quantize import Scheme, register\nregister(Scheme('w8a8', None, None, 'impostor'))\n"
    site = plugins_site(tmp_path / "site", {"wemask.quantization": ["toy_bf16 = toy_quant_scheme", "bad = impostor_scheme"]},
                        {"impostor_scheme": impostor})
    listed = wemask(site, "eval", "--help", blocked=True)
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.replace("│", " ").split())
    assert "w8a8 (INT8 weights and inputs)" in text and "toy_bf16 (toy: bfloat16 weights and inputs, from tests/)" in text
    assert "impostor" not in listed.stdout and listed.stderr.count("\n") == 1, listed.stderr
    assert listed.stderr.startswith("wemask: warning: the quantization scheme plugin bad = 'impostor_scheme'")
    assert "registers the quantization scheme 'w8a8', which is already wemask_cli.eval.quantize.schemes.w8a8 (built-in)" in listed.stderr


def test_the_eval_settings_import_no_task():
    code = "import sys, wemask_cli.eval.settings; print(sorted(m for m in sys.modules if m.startswith('wemask_cli.eval.tasks')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.embedded
def test_a_plugin_tasks_own_flag_on_the_embedded_model(site, tmp_path):
    out = tmp_path / "toy"
    done = wemask(site, "eval", "--task", "toy-flag", "--toy-max-new", "1", "--limit", "2", "-r", "0,0.3",
                  "--me-layer", "11", "--output", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["options"] == {"toy_max_new": 1} and "SmolLM2-135M-Instruct" in metrics["model"], metrics["model"]
    records = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(record["max_new"] == 1 and record["tokens"] <= 2 for record in records), records


def test_a_task_option_spelled_like_a_flag_of_eval_is_left_out_with_one_warning(tmp_path):
    module = ("from wemask_cli.eval.tasks import TaskFlag, register\nfrom toy_eval_task import ToyLengthTask\n\n"
              "@register\nclass Engined(ToyLengthTask):\n    name = 'engined'\n    options = (TaskFlag('engine', str, 'mine'),)\n")
    site = plugins_site(tmp_path / "site", {"wemask.eval_tasks": ["engined = engined_task"]}, {"engined_task": module})
    listed = wemask(site, "eval", "--help", blocked=True)
    assert listed.returncode == 0 and "engined:" in listed.stdout and "--engine" in listed.stdout, listed.stderr
    assert listed.stderr == ("wemask: warning: the eval task option --engine (engine) is already a flag of wemask eval; it is "
                             "left out: rename it\n"), listed.stderr
