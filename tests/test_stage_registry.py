"""Trainer stages and data layouts on the one Registry (wemask_cli/runtime/registry.py): the built-ins in their declared
order however they were imported, checked declarations, duplicates naming both sources, and a layout from another
package (tests/toy_layout.py, through the `wemask.data_layouts` entry point) feeding a built-in stage."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from plugin_support import TESTS, plugin_site, plugins_site, wemask

from wemask_cli.data.formats import SUPERVISED
from wemask_cli.data.layouts import LAYOUTS, DataLayout
from wemask_cli.runtime.registry import RegistryError
from wemask_cli.train.stage_registry import BUILTIN, STAGES, StageFlag


def test_built_in_stages_keep_their_order_whichever_module_is_imported_first():
    """Built-in specs are instances of one class: they rank by the module that declares them (module_of), not by
    import order, so `wemask --help` lists sft, dpo, grpo, kto, rloo even when grpo was imported first."""
    code = "import wemask_cli.train.kto, wemask_cli.train.grpo\nfrom wemask_cli.train.stage_registry import STAGES\nprint(list(STAGES.builtins()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(BUILTIN))


def test_a_stage_declaration_is_checked_and_a_second_sft_names_both():
    sft = STAGES.get("sft")
    with pytest.raises(RegistryError, match="declares the flag --extra of type dict"):
        STAGES.register(dataclasses.replace(sft, name="dict-stage", flags=(StageFlag("extra", dict, "x"),)))
    with pytest.raises(RegistryError, match="registers the trainer stage 'sft', which is already .*StageSpec \\(built-in\\)"):
        STAGES.register(dataclasses.replace(sft, stage_class="elsewhere:Stage"), "elsewhere.Stage (plugin x)")
    with pytest.raises(RegistryError, match="is not a StageSpec"):
        STAGES.register(object())
    with pytest.raises(RegistryError, match="names its TRL config 'SFTConfig': name it as 'module:Class' \\('trl:SFTConfig'\\)"):
        STAGES.register(dataclasses.replace(sft, name="bare-config", trl_config="SFTConfig"))
    assert "dict-stage" not in STAGES and "bare-config" not in STAGES and STAGES.get("sft") is sft
    import trl

    assert sft.config_class() is trl.SFTConfig and sft.load().__name__ == "SFTStage"


def test_layouts_feed_kinds_of_data_not_stages():
    assert list(LAYOUTS) == ["verl", "alpaca", "sharegpt", "prompt-completion-label", "preference pairs"]
    assert {kind for layout in LAYOUTS.entries().values() for kind in layout.feeds} == {
        "supervised", "preference", "prompts", "unpaired"}
    with pytest.raises(RegistryError, match="feeds no kind of data"):
        LAYOUTS.register(type("Empty", (DataLayout,), {"name": "empty"}))
    with pytest.raises(RegistryError, match="registers the data layout 'verl', which is already wemask_cli.data.verl.Verl"):
        LAYOUTS.register(type("Verl", (DataLayout,), {"name": "verl", "feeds": {SUPERVISED.kind: print}, "__module__": "elsewhere"}))


def test_a_plugin_layout_feeds_a_built_in_stage(tmp_path, tiny_model_dir):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {n} + 1?", "reply": f"{n + 1}."}) + "\n" for n in range(8)))
    out = tmp_path / "o"
    site = plugin_site(tmp_path / "site", "wemask.data_layouts", "question-reply = toy_layout")
    done = wemask(site, "sft", "--model", tiny_model_dir, "--dataset", str(data), "-o", str(out), "--mask-rate", "0.5",
                  "--me-layer", "1", "--max-steps", "1", "--max-length", "32", "--per-device-train-batch-size", "2",
                  "--save-strategy", "no", "--report-to", "none")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sft: 8 examples (question-reply (toy plugin))" in done.stderr
    assert json.loads((out / "wemask_run.json").read_text())["data_format"] == "question-reply (toy plugin)"


def test_a_plugin_layout_named_like_a_built_in_is_one_warning_and_the_built_in_works(tmp_path):
    clash = "from wemask_cli.data.layouts import LAYOUTS\nimport toy_layout\n\n@LAYOUTS.register\nclass Verl(toy_layout.QuestionReply):\n    name = 'verl'\n"
    site = plugins_site(tmp_path / "site", {"wemask.data_layouts": ["verl-again = verl_again"]}, {"verl_again": clash})
    code = "from wemask_cli.data.layouts import LAYOUTS\nprint(list(LAYOUTS))\nprint(type(LAYOUTS.get('verl')).__name__, LAYOUTS.get('verl').__module__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "verl_again" not in done.stdout and "question-reply" not in done.stdout  # left out whole
    assert done.stdout.splitlines()[1] == "type wemask_cli.data.verl"
    (warning,) = done.stderr.splitlines()
    assert warning.startswith("wemask: warning: the data layout plugin verl-again = 'verl_again' ")
    assert "already wemask_cli.data.verl.Verl (built-in)" in warning
