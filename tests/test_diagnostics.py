"""`--log-diagnostics` (recipe `log_diagnostics: true`): the probe's three numbers join the trainer's logs at every
logging step of sft, dpo, grpo and kto (log history, metrics.json), move when the weights move, measure the model as
trained (the mask on in aware mode), leave train mode as it was, and cost nothing when off."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.train.diagnostics import KEYS, PROBE, Diagnostics
from wemask_cli.train.dpo import DPOStage
from wemask_cli.train.grpo import GRPOStage
from wemask_cli.train.kto import KTOStage
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = {"sft": "sft_chat.jsonl", "dpo": "preferences.jsonl", "kto": "feedback.jsonl", "grpo": "math_problems.jsonl"}
STAGES = {"sft": SFTStage, "dpo": DPOStage, "kto": KTOStage, "grpo": GRPOStage}
TRL_ARGS = [
    "--max-steps", "3", "--per-device-train-batch-size", "2", "--logging-steps", "1", "--learning-rate", "1e-2",
    "--report-to", "none", "--save-strategy", "no", "--seed", "0",
]  # fmt: skip
STAGE_ARGS = {"sft": ["--max-length", "48"], "dpo": ["--max-length", "48"], "kto": ["--max-length", "48"],
              "grpo": ["--num-generations", "2", "--max-completion-length", "4", "--temperature", "1.0"]}  # fmt: skip


LENGTH_REWARD = "def length_reward(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n"


def train(tmp_path, stage: str, model: str, extra=(), **options):
    options.setdefault("mask_rate", 0.5)
    options.setdefault("me_layer", 1)
    if stage == "grpo":  # rewards that differ within a group: GRPO's updates are not zero
        Path(tmp_path).mkdir(parents=True, exist_ok=True)
        (Path(tmp_path) / "rewards.py").write_text(LENGTH_REWARD)
        options["stage_options"] = {"reward": [f"{tmp_path}/rewards.py:length_reward"]}
    return run(
        STAGES[stage](),
        TrainOptions(model=model, output_dir=str(tmp_path / stage), dataset=str(ROOT / "data" / DATA[stage]),
                     dataset_split="train[:8]", **options),
        [*TRL_ARGS, *STAGE_ARGS[stage], *extra],
    )  # fmt: skip


def diagnostics_logs(result) -> list[dict]:
    return [entry for entry in result.trainer.state.log_history if KEYS[0] in entry]


def check_logged_every_step(result) -> None:
    """Every training log (one with a loss) carries the three keys; step 0 opens the history; metrics.json has it all."""
    logs = result.trainer.state.log_history
    training = [entry for entry in logs if "loss" in entry]
    assert [entry["step"] for entry in training] == [1, 2, 3]
    assert all(key in entry and math.isfinite(entry[key]) for entry in training for key in KEYS)
    assert [entry["step"] for entry in diagnostics_logs(result)] == [0, 1, 2, 3]
    metrics = json.loads((result.output_dir / "metrics.json").read_text())
    history = metrics["diagnostics_history"]
    assert [row[0] for row in history] == [0, 1, 2, 3]
    assert history == [[entry["step"], *(entry[key] for key in KEYS)] for entry in diagnostics_logs(result)]
    assert metrics["diagnostics"] == dict(zip(("first_token_norm", "sink_mass", "effective_rank"), history[-1][1:]))
    probe = metrics["diagnostics_probe"]
    assert probe["indices"] == list(PROBE) and len(probe["tokens"]) == len(PROBE) and probe["me_layer"] == 1
    assert probe["layers"] == [2, 3] and probe["with_mask"] is True


def moved(result) -> None:
    """With a high learning rate each logged value differs from the one before it (not one number logged again)."""
    rows = [[entry[key] for key in KEYS] for entry in diagnostics_logs(result)]
    for before, after in zip(rows, rows[1:]):
        assert all(a != pytest.approx(b, rel=1e-6, abs=1e-9) for a, b in zip(after, before)), rows


@pytest.mark.parametrize("extra", [[], ["--gradient-checkpointing"]], ids=["full", "lora-checkpointing"])
def test_sft_logs_the_probe_at_every_logging_step(tmp_path, tiny_model_dir, extra):
    result = train(tmp_path, "sft", tiny_model_dir, extra, log_diagnostics=True, use_peft=bool(extra))
    check_logged_every_step(result)
    moved(result)
    assert result.trainer.model.training  # the probe ran in eval mode and put train mode back


@pytest.mark.parametrize("stage", ["dpo", "kto", "grpo"])
def test_other_stages_log_the_probe(tmp_path, tiny_model_dir, stage):
    result = train(tmp_path, stage, tiny_model_dir, log_diagnostics=True)
    check_logged_every_step(result)
    rows = [entry[KEYS[1]] for entry in diagnostics_logs(result)]
    if stage != "grpo":  # the tiny GRPO run's rewards are equal within a group: nothing to learn, the weights stay
        assert len(set(rows)) > 1, rows  # the weights moved, the sink mass with them


def test_off_by_default_no_keys_no_probe(tmp_path, tiny_model_dir):
    result = train(tmp_path, "sft", tiny_model_dir)
    assert not any(key.startswith("wemask/") for entry in result.trainer.state.log_history for key in entry)
    metrics = json.loads((result.output_dir / "metrics.json").read_text())
    assert not {"diagnostics", "diagnostics_history", "diagnostics_probe"} & set(metrics)
    assert "log" not in vars(result.trainer)  # the trainer's own log, not wrapped
    assert not any(isinstance(c, Diagnostics) for c in result.trainer.callback_handler.callbacks)


def test_the_probe_measures_the_masked_model_in_aware_mode(tmp_path, tiny_model_dir):
    """Step 0 is before any update: the aware run's probe differs from the plain one's only by the mask."""
    plain = train(tmp_path / "plain", "sft", tiny_model_dir, log_diagnostics=True, mask_rate=0.0)
    aware = train(tmp_path / "aware", "sft", tiny_model_dir, log_diagnostics=True, mask_rate=1.0)
    free = train(tmp_path / "free", "sft", tiny_model_dir, log_diagnostics=True, mask_rate=1.0, mode="free")
    start = {name: diagnostics_logs(result)[0] for name, result in (("plain", plain), ("aware", aware), ("free", free))}
    assert start["aware"][KEYS[1]] != pytest.approx(start["plain"][KEYS[1]], rel=1e-4)
    assert start["free"] == start["plain"]  # free mode trains (and is measured) without the mask
    probe = json.loads((free.output_dir / "metrics.json").read_text())["diagnostics_probe"]
    assert probe["with_mask"] is False and probe["me_layer"] == 1


def test_measuring_keeps_the_mode_it_found(tmp_path, tiny_model_dir):
    result = train(tmp_path, "sft", tiny_model_dir, log_diagnostics=True)
    diagnostics = next(c for c in result.trainer.callback_handler.callbacks if isinstance(c, Diagnostics))
    for mode in (True, False):
        diagnostics.model.train(mode)
        first = diagnostics.measure()
        assert diagnostics.model.training is mode and diagnostics.measure() == first  # eval mode: no dropout


def test_recipe_key_through_the_cli(monkeypatch, capsys, tmp_path, tiny_model_dir):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: {tiny_model_dir}\ndataset: {ROOT / 'data' / 'sft_chat.jsonl'}\nlog_diagnostics: true\n"
                      "max_steps: 2\nlogging_steps: 1\nmax_length: 48\nper_device_train_batch_size: 2\nreport_to: none\n")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--config", str(recipe), "-o", str(tmp_path / "run"))
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [row[0] for row in metrics["diagnostics_history"]] == [0, 1, 2]
    assert metrics["diagnostics_probe"]["me_layer_source"] == "no ME layer found: layer 0"  # a random model has none
    record = json.loads((tmp_path / "run" / "wemask_run.json").read_text())
    assert record["options"]["log_diagnostics"] is True and record["set_by"]["wemask"]["log_diagnostics"] == "recipe"


def test_report_draws_a_curve_per_run_per_diagnostic(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """Two real runs (plain and aware): `wemask report` draws a panel per diagnostic against the step, a curve per
    run with the values of its metrics.json, in a clean layout, and its table lists the last values."""
    from test_figures import assert_clean_layout

    from wemask_cli.commands.report import gather
    from wemask_cli.render.report import report_figure

    runs = {name: train(tmp_path / name, "sft", tiny_model_dir, log_diagnostics=True, mask_rate=rate).output_dir
            for name, rate in (("plain", 0.0), ("aware", 0.5))}  # fmt: skip
    fig = report_figure(gather(list(runs.values())))
    assert_clean_layout(fig)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    for column, name in enumerate(("first_token_norm", "sink_mass", "effective_rank"), 1):
        ax = panels[f"sft training dynamics: wemask/{name}"]
        assert ax.get_xlabel() == "step" and len(ax.get_lines()) == 2
        drawn = sorted((list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines())
        expected = sorted(([row[0] for row in history], [row[column] for row in history]) for history in (
            json.loads((folder / "metrics.json").read_text())["diagnostics_history"] for folder in runs.values()))
        assert drawn == expected
    assert "sft: diagnostics/sink_mass" in panels  # the last values, by mask rate
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "plain/sft (no mask)" in labels and "aware/sft (aware r=0.5)" in labels  # a legend entry per run
    plot = tmp_path / "report.png"
    code, out, err = run_main(monkeypatch, capsys, "report", *map(str, runs.values()), "--plot", str(plot))
    assert code == 0 and plot.stat().st_size > 0, err
    assert "diagnostics/effective_rank" in out


@pytest.mark.embedded
def test_embedded_model_two_steps_from_the_cli(monkeypatch, capsys, tmp_path, embedded_dir):
    """The real model through `wemask sft`: LoRA, aware r = 0.3; the probe sits at its ME layer (11), where the first
    token's norm is massive, and the mask lowers the sink mass after it against the plain run's step 0."""
    runs = {}
    for name, mask in (("plain", []), ("aware", ["--mask-rate", "0.3"])):
        code, _, err = run_main(monkeypatch, capsys, "sft", "--dataset", str(ROOT / "data" / "sft_chat.jsonl"), "--use-peft",
                                "--log-diagnostics", *mask, "--max-steps", "2", "--logging-steps", "1", "--max-length", "128",
                                "--per-device-train-batch-size", "2", "--report-to", "none", "--save-strategy", "no",
                                "-o", str(tmp_path / name))  # fmt: skip
        assert code == 0, err
        runs[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    for metrics in runs.values():
        assert [row[0] for row in metrics["diagnostics_history"]] == [0, 1, 2]
        assert metrics["diagnostics_probe"]["me_layer"] == 11 and metrics["diagnostics_probe"]["layers"] == list(range(12, 30))
    plain, aware = (runs[name]["diagnostics_history"][0] for name in ("plain", "aware"))
    assert plain[1] > 1000  # the massive activation
    assert aware[2] < plain[2]  # the mask weakens the sink
    assert runs["aware"]["diagnostics_probe"]["with_mask"] and not runs["plain"]["diagnostics_probe"]["with_mask"]
