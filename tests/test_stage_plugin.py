"""A trainer stage from outside the package (tests/toy_stage.py), registered only through the `wemask.stages`
entry point group (a dist-info folder on the path, as installing a plugin package leaves): it is a `wemask`
command with its own flag, answers `--help` without torch, trains end to end with the usual run records, and
`wemask report` reads it. Nothing inside wemask_cli names it."""

from __future__ import annotations

import json

import pytest
from plugin_support import TESTS, plugin_site, wemask, wemask_each

DATA = str(TESTS.parent / "data" / "sft_chat.jsonl")


def declaring(tmp_path, entry: str):
    """A site folder on which importlib.metadata finds a distribution declaring `entry` in `wemask.stages`."""
    return plugin_site(tmp_path / "site", "wemask.stages", entry)


@pytest.fixture
def plugin_path(tmp_path):
    return declaring(tmp_path, "toy-sft = toy_stage:STAGE")


def test_plugin_stage_is_a_command_whose_help_needs_no_torch(plugin_path, trl_flags_known):
    listing = wemask(plugin_path, "--help", blocked=True)  # listed from the entry point's metadata: nothing loaded
    assert listing.returncode == 0 and "toy-sft" in listing.stdout and "wemask-toy-plugin 0.1" in listing.stdout, listing.stderr
    assert "Toy supervised fine-tuning" not in listing.stdout
    own = wemask(plugin_path, "toy-sft", "--help", blocked=True)
    assert own.returncode == 0 and "--toy-note" in own.stdout and "--mask-rate" in own.stdout, own.stderr
    assert "Toy supervised fine-tuning" in own.stdout
    typo = wemask(plugin_path, "toy-sft", "--toy-notes", "x", blocked=True)  # TRL's SFTConfig flags known too
    assert typo.returncode == 2 and "No such option: --toy-notes (did you mean --toy-note?)" in typo.stderr, typo.stderr
    assert "toy-sft" not in wemask(None, "--help", blocked=True).stdout


@pytest.mark.parametrize(
    "entry, message",
    [
        ("bad = no_such_module:STAGE", "failed to load: ModuleNotFoundError: No module named 'no_such_module'"),
        ("bad = toy_stage:ToySFTStage", "is not a StageSpec"),
        ("bad = toy_stage:STAGE", "declares the stage 'toy-sft' under the entry-point name 'bad': name them alike"),
    ],
    ids=("missing", "not-a-spec", "misnamed"),
)
def test_a_broken_plugin_is_one_warning_and_the_rest_works(tmp_path, entry, message):
    site = declaring(tmp_path, entry)
    listing = wemask(site, "--help", blocked=True)  # the plugin is not loaded: listed, and no warning
    assert listing.returncode == 0 and " sft " in listing.stdout and " bad " in listing.stdout and not listing.stderr
    done = wemask(site, "bad", "--help", blocked=True)
    assert done.returncode == 2 and "No such command 'bad'" in done.stderr, done.stderr
    warning = done.stderr.splitlines()[0]
    assert warning.startswith("wemask: warning: the trainer stage plugin bad = ") and message in warning, done.stderr
    assert "wemask-toy-plugin 0.1" in warning and done.stderr.count("\n") == 2
    builtin = wemask(site, "sft", "--help", blocked=True)  # a built-in stage's command loads no stage plugin
    assert builtin.returncode == 0 and "--mask-rate" in builtin.stdout and not builtin.stderr, builtin.stderr


def test_a_plugin_stage_named_like_a_built_in_is_one_warning_and_the_built_in_works(tmp_path):
    done = wemask(declaring(tmp_path, "sft = toy_stage:STAGE"), "sft", "--help", blocked=True)
    assert done.returncode == 0 and "Supervised fine-tuning with TRL" in done.stdout and "--toy-note" not in done.stdout
    assert done.stderr.count("\n") == 1 and "takes the name 'sft' of the built-in stage wemask_cli.train.sft" in done.stderr


def test_plugin_stage_trains_writes_its_records_and_reports(plugin_path, tmp_path, tiny_model_dir):
    out, rows_file = tmp_path / "toy", tmp_path / "rows.json"
    done, report = wemask_each(  # one process: the run, then the report of it
        plugin_path,
        ["toy-sft", "--model", tiny_model_dir, "--dataset", DATA, "-o", str(out), "--mask-rate", "0.5", "--me-layer", "1",
         "--toy-note", "hello", "--max-steps", "2", "--max-length", "64", "--per-device-train-batch-size", "2",
         "--save-strategy", "no", "--report-to", "none"],
        ["report", str(out), "--no-plot", "--json", str(rows_file)],
    )  # fmt: skip
    assert done[0] == 0, done[2][-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    record = json.loads((out / "wemask_run.json").read_text())
    assert metrics["stage"] == "toy-sft" and metrics["global_step"] == 2 and metrics["mask_rate"] == 0.5
    assert metrics["toy_note"] == "hello" and record["options"]["toy_note"] == "hello"
    assert record["set_by"]["wemask"]["toy_note"] == "flag" and record["data_format"] == "messages"
    assert json.loads((out / "wemask_config.json").read_text())["mask_rate"] == 0.5
    assert report[0] == 0, report[2]
    rows = json.loads(rows_file.read_text())
    assert any(row["stage"] == "toy-sft" and row["metric"] == "final_loss" for row in rows), rows


def test_plugin_stage_option_from_a_recipe(tmp_path):
    """The stage's own option is a recipe key too, typed by its declaration."""
    from toy_stage import ToySFTStage

    from wemask_cli.train.options import TrainOptions
    from wemask_cli.train.resolve import resolve

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"dataset: {DATA}\ntoy_note: from-recipe\n")
    resolved = resolve(ToySFTStage(), TrainOptions(config=str(recipe), output_dir=str(tmp_path / "o")), [])
    assert resolved.opts["toy_note"] == "from-recipe" and resolved.provenance["wemask"]["toy_note"] == "recipe"
    recipe.write_text(f"dataset: {DATA}\ntoy_note: [1, 2]\n")
    with pytest.raises(Exception, match="toy_note"):
        resolve(ToySFTStage(), TrainOptions(config=str(recipe), output_dir=str(tmp_path / "o")), [])
