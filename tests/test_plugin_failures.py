"""A broken plugin is one warning line and the rest works, in every entry-point group (wemask.stages,
wemask.interventions, wemask.eval_tasks): one that raises RuntimeError, has a SyntaxError or calls sys.exit(3) on
import, one with a bad declaration, and one whose name clashes with a built-in. `wemask --help` and `--version` load
no plugin at all; a command loads only the groups it needs, each plugin guarded (wemask_cli/runtime/plugins.py). A plugin
that registered something before failing is undone as a whole. The working toy plugins next to them still work."""

from __future__ import annotations

import pytest
from plugin_support import plugins_site, wemask

DIST = "from the distribution wemask-toy-plugin 0.1"
MODULES = {
    "raises_runtime": "raise RuntimeError('boom at import')\n",
    "bad_syntax": "def broken(:\n",
    "exits": "import sys\nsys.exit(3)\n",
    "not_a_spec": "STAGE = 'a string, not a StageSpec'\n",
    "grpo_named": "import toy_stage, dataclasses\nSTAGE = dataclasses.replace(toy_stage.STAGE, name='grpo')\n",
    "dict_flag": ("import toy_stage, dataclasses\nfrom wemask_cli.train.stage_registry import StageFlag\n"
                  "STAGE = dataclasses.replace(toy_stage.STAGE, name='flag-stage', flags=(StageFlag('extra', dict, 'x'),))\n"),
    "list_kind": (
        "from dataclasses import dataclass\nfrom wemask_cli.interventions import Intervention, flag, register\n\n"
        "@register\n@dataclass\nclass ListKind(Intervention):\n    sizes: list = flag(None, 'sizes', main=True)\n"
        "    kind = 'list_kind'\n"
    ),
    "gated_norm_again": (
        "from dataclasses import dataclass\nfrom wemask_cli.interventions import Intervention, register\n\n"
        "@register\n@dataclass\nclass Impostor(Intervention):\n    kind = 'gated_norm'\n"
    ),
    "unknown_flag_task": (
        "from wemask_cli.eval.tasks import Task, register\n\n"
        "@register\nclass Odd(Task):\n    name = 'odd'\n    flags = frozenset({'no_such_flag'})\n"
    ),
    "perplexity_again": (  # registers one task, then clashes: both are undone
        "from wemask_cli.eval.tasks import Task, register\n\n@register\nclass Half(Task):\n    name = 'half-task'\n\n"
        "@register\nclass Impostor(Task):\n    name = 'perplexity'\n"
    ),
}
BROKEN = {  # entry, the reason its warning gives
    "runtime": ("raises_runtime", "failed to load: RuntimeError: boom at import"),
    "syntax": ("bad_syntax", "failed to load: SyntaxError: "),
    "exit": ("exits", "failed to load: SystemExit: 3"),
}
STAGES = {**{f"{k}-stage": (f"{m}:STAGE", why) for k, (m, why) in BROKEN.items()},
          "odd-stage": ("not_a_spec:STAGE", "is not a StageSpec"),
          "flag-stage": ("dict_flag:STAGE", "declares the flag --extra of type dict: a stage's flag is str, int, float, "
                         "bool or list"),
          "clash-stage": ("grpo_named:STAGE", "takes the name 'grpo' of a built-in stage (wemask_cli.train.grpo)")}
KINDS = {**{k: (m, why) for k, (m, why) in BROKEN.items()},
         "list": ("list_kind", "RegistryError: ListKind declares --list-kind of a type other than str, int, float or bool"),
         "clash": ("gated_norm_again", "registers the intervention 'gated_norm', which is already "
                   "wemask_cli.interventions.gated_norm.GatedNorm (built-in)")}
TASKS = {**{k: (m, why) for k, (m, why) in BROKEN.items()},
         "odd": ("unknown_flag_task", "RegistryError: Odd declares unknown flags ['no_such_flag']"),
         "clash": ("perplexity_again", "registers the eval task 'perplexity', which is already "
                   "wemask_cli.eval.tasks.perplexity.PerplexityTask (built-in)")}
SFT_NAMED = ("sft = toy_stage:STAGE", "takes the name 'sft' of the built-in stage wemask_cli.train.sft")
GROUPS = {"wemask.stages": ("trainer stage", STAGES), "wemask.interventions": ("intervention", KINDS),
          "wemask.eval_tasks": ("eval task", TASKS)}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Every broken plugin above, next to the working toy stage, intervention and eval task (tests/toy_*.py)."""
    groups = {group: [f"{name} = {entry}" for name, (entry, _) in plugins.items()] for group, (_, plugins) in GROUPS.items()}
    groups["wemask.stages"] += ["toy-sft = toy_stage:STAGE", SFT_NAMED[0]]
    groups["wemask.interventions"].append("scale_norm = toy_scale_norm")
    groups["wemask.eval_tasks"].append("toy-length = toy_eval_task")
    return plugins_site(tmp_path_factory.mktemp("plugins") / "site", groups, MODULES)


def warnings_of(group: str) -> list[tuple[str, str]]:
    """(how its warning line starts, the reason in it) for each broken plugin of `group`."""
    what, plugins = GROUPS[group]
    return [(f"wemask: warning: the {what} plugin {name} = {entry!r} {DIST} ({group}) ", why)
            for name, (entry, why) in plugins.items()]


def assert_warned(stderr: str, *groups: str) -> None:
    """stderr is exactly the warning lines of `groups`' broken plugins and the stage named like sft, once each."""
    lines = stderr.splitlines()
    expected = [(f"wemask: warning: the trainer stage plugin sft = 'toy_stage:STAGE' {DIST} (wemask.stages) ", SFT_NAMED[1])]
    expected += [line for group in groups for line in warnings_of(group)]
    assert len(lines) == len(expected), stderr
    for start, why in expected:
        assert any(line.startswith(start) and why in line and line.endswith("left out: fix or uninstall the package that "
                                                                            "declares it") for line in lines), (start, why, stderr)


def test_help_and_version_load_no_plugin(site):
    listing = wemask(site, "--help", blocked=True)
    assert listing.returncode == 0, listing.stderr  # exits.py would have ended it with 3
    assert all(f" {name} " in listing.stdout for name in ("sft", "dpo", "grpo", "eval", "toy-sft", "runtime-stage"))
    assert_warned(listing.stderr)  # read from the metadata alone: the entry point named sft
    version = wemask(site, "--version", blocked=True)
    assert (version.returncode, version.stdout, version.stderr) == (0, "wemask 0.1.0\n", ""), version


def test_a_training_command_warns_once_per_broken_intervention_and_keeps_the_working_one(site):
    done = wemask(site, "sft", "--help", blocked=True)  # a built-in stage: no stage plugin loads
    assert done.returncode == 0 and "--gated-norm" in done.stdout and "--scale-norm" in done.stdout, done.stderr
    assert_warned(done.stderr, "wemask.interventions")


def test_eval_warns_once_per_broken_task_and_undoes_a_half_registered_one(site):
    done = wemask(site, "eval", "--help", blocked=True)
    assert done.returncode == 0 and "perplexity:" in done.stdout and "toy-length:" in done.stdout, done.stderr
    assert "half-task" not in done.stdout and "odd" not in done.stdout
    assert_warned(done.stderr, "wemask.eval_tasks")


def test_a_plugin_stage_works_next_to_broken_ones(site):
    done = wemask(site, "toy-sft", "--help", blocked=True)
    assert done.returncode == 0 and "--toy-note" in done.stdout and "--scale-norm" in done.stdout, done.stderr
    assert_warned(done.stderr, "wemask.stages", "wemask.interventions")
    gone = wemask(site, "runtime-stage", "--help", blocked=True)
    assert gone.returncode == 2 and "No such command 'runtime-stage'" in gone.stderr, gone.stderr


def test_did_you_mean_offers_no_command_just_left_out(site):
    """runtime-stage loads the stage plugins: syntax-stage and exit-stage, as close a spelling, are warned as left out."""
    gone = wemask(site, "runtime-stage", "--help", blocked=True)
    assert gone.returncode == 2, gone.stderr
    assert gone.stderr.splitlines()[-1] == "wemask: error: No such command 'runtime-stage'. (see 'wemask --help')"
    near = wemask(site, "toy-sf", blocked=True)  # nothing loaded yet: every listed command may be meant
    assert near.returncode == 2 and "(did you mean 'toy-sft'?)" in near.stderr, near.stderr
