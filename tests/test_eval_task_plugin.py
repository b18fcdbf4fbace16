"""The eval-task extension point: a task declared outside the package (tests/toy_eval_task.py), registered only
through the entry-point group `wemask.eval_tasks`, is listed in `wemask eval --help` (without torch), runs end to end
with `wemask eval --task toy-length` (metrics.json, results.csv, the table) and `wemask report` reads it. Nothing
inside wemask_cli names it."""

from __future__ import annotations

import csv
import json
import re

import pytest
from plugin_support import TESTS, plugin_site, wemask, wemask_each

from wemask_cli.eval.settings import EvalSettings
from wemask_cli.eval.tasks import registry
from wemask_cli.eval.tasks.resolve import resolve


@pytest.fixture
def site(tmp_path):
    return plugin_site(tmp_path / "site", "wemask.eval_tasks", "toy-length = toy_eval_task")


def test_the_plugin_task_is_listed_in_help_without_torch(site):
    listed = wemask(site, "eval", "--help", blocked=True)
    assert listed.returncode == 0 and "toy-length: toy plugin: mean completion length in tokens" in listed.stdout, listed.stderr
    assert "toy-length" not in wemask(None, "eval", "--help", blocked=True).stdout


@pytest.mark.parametrize("name", ["perplexity", "choice", "math", "refusal", "lm-eval", "toy-length"])
def test_no_code_outside_the_tasks_compares_a_task_name(name):
    """Settings, flags, data, the command, engines and renderers read the tasks' declarations: only a task's own module
    compares its name (rewards/ has its own 'math' reward)."""
    package = TESTS.parent / "wemask_cli"
    pattern = re.compile(rf"""(==|!=|\bin)\s*\(?[^\n]*["']{re.escape(name)}["']|["']{re.escape(name)}["']\s*(==|!=|:)""")
    offenders = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if path.relative_to(package).parts[0] in ("eval", "commands", "cli", "engines", "render")
                 and "tasks" not in path.relative_to(package).parts[:2] and pattern.search(path.read_text())]
    assert not offenders, offenders


def test_the_plugin_task_runs_writes_its_outputs_and_reports(site, tmp_path, tiny_model_dir):
    out, report_json = tmp_path / "toy", tmp_path / "rows.json"
    (code, stdout, stderr), report = wemask_each(  # one process: the eval, then the report of it
        site,
        ["eval", "--model", tiny_model_dir, "--task", "toy-length", "--limit", "2", "-r", "0,0.5", "--me-layer", "1",
         "--output", str(out)],
        ["report", str(out), "--no-plot", "--json", str(report_json)],
    )  # fmt: skip
    assert code == 0, stderr[-2000:]
    assert "mean_tokens" in stdout and "toy-length on the bundled eval/perplexity.txt" in stderr
    assert "2 sentences" in stderr, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "toy-length" and metrics["primary_metric"] == "mean_tokens" and metrics["unit"] == "sentences"
    assert metrics["n_examples"] == 2 and metrics["mask_rates"] == [0.0, 0.5]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(row["mask_rate"], row["metric"], row["n"]) for row in rows] == [("0.0", "mean_tokens", "2"), ("0.5", "mean_tokens", "2")]
    assert all(float(row["value"]) >= 0 for row in rows), rows
    assert report[0] == 0, report[2]
    reported = json.loads(report_json.read_text())
    assert any(row["metric"] == "toy-length/mean_tokens" and row["task"] == "toy-length" for row in reported), reported


def test_a_flag_the_plugin_task_does_not_declare_is_refused_by_its_declarations(site):
    done = wemask(site, "eval", "--task", "toy-length", "--window", "32", blocked=True)
    assert done.returncode == 2 and "--window applies to the perplexity and diversity tasks, not to toy-length" in done.stderr, done.stderr


def test_a_broken_plugin_is_one_warning_and_the_builtin_tasks_work(tmp_path):
    broken = plugin_site(tmp_path / "site", "wemask.eval_tasks", "bad = no_such_eval_module")
    done = wemask(broken, "eval", "--help", blocked=True)
    assert done.returncode == 0 and "perplexity:" in done.stdout, done.stderr
    assert done.stderr.startswith("wemask: warning: the eval task plugin bad") and "no_such_eval_module" in done.stderr


def test_builtin_task_declarations_drive_the_settings_checks():
    """Every built-in task declares its flags and column roles; a field flag the task does not declare is refused."""
    for name, cls in registry.tasks().items():
        assert cls.name == name and cls.primary is not None and set(cls.flags) <= set(registry.TASK_FLAGS), name
    with pytest.raises(Exception, match="--choices-field applies to the choice task, not to math"):
        resolve(EvalSettings(task="math", choices_field="opts"))
    with pytest.raises(Exception, match="--text-field applies to the perplexity and diversity tasks, not to refusal"):
        resolve(EvalSettings(task="refusal", text_field="body"))


def test_the_lm_eval_task_is_registered_and_needs_its_own_flag():
    """tasks/lm_eval.py is a registered task chosen by --lm-eval-tasks; `--task lm-eval` alone names that flag."""
    assert registry.tasks()["lm-eval"].selector == "lm_eval_tasks"
    done = wemask(None, "eval", "--task", "lm-eval", blocked=True)
    assert done.returncode == 2 and "--task lm-eval needs the lm-eval task names: give --lm-eval-tasks" in done.stderr, done.stderr
