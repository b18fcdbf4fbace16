"""`wemask kto` on TRL's KTOTrainer, a stage declared in one module (train/kto.py) over unpaired feedback
(data/unpaired.py): WeMask on the policy and the reference (--ref-mask), free mode and r=0 as plain KTO, the two
layouts it reads, one-line errors, and a short CLI run on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.data import load_training_data
from wemask_cli.data.unpaired import UNPAIRED
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.kto import KTOStage
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run

ROOT = Path(__file__).resolve().parents[1]
FEEDBACK = str(ROOT / "data" / "feedback.jsonl")
PREFS = str(ROOT / "data" / "preferences.jsonl")
TRL_ARGS = [
    "--max-steps", "2", "--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "64",
    "--learning-rate", "1e-3", "--report-to", "none", "--save-strategy", "no", "--seed", "0",
]  # fmt: skip
ZERO = 1e-6  # |reward| at the first step with --ref-mask same


def train(tmp_path, name, model, *, dataset=FEEDBACK, **options):
    stage_options = {"ref_mask": options.pop("ref_mask", None)}
    options.setdefault("me_layer", 1)
    return run(
        KTOStage(),
        TrainOptions(model=model, output_dir=str(tmp_path / name), dataset=dataset, dataset_split="train[:8]",
                     stage_options=stage_options, **options),
        TRL_ARGS,
    )  # fmt: skip


def first(result) -> dict:
    return next(e for e in result.trainer.state.log_history if "kl" in e)


def losses(result) -> list[float]:
    return [e["loss"] for e in result.trainer.state.log_history if "loss" in e]


def test_mask_on_policy_and_reference_starts_at_zero_reward_and_none_does_not(tmp_path, tiny_model_dir):
    same = train(tmp_path, "same", tiny_model_dir, mask_rate=0.5)  # default in aware mode
    none = train(tmp_path, "none", tiny_model_dir, mask_rate=0.5, ref_mask="none")
    assert same.metrics["masked_layers"] == {"policy": [1, 2, 3], "reference": [1, 2, 3]}
    assert none.metrics["masked_layers"] == {"policy": [1, 2, 3], "reference": []}
    assert same.metrics["reference"] == none.metrics["reference"] == "separate model"
    s, n = first(same), first(none)
    assert abs(s["rewards/chosen"]) < ZERO and abs(s["rewards/rejected"]) < ZERO and abs(s["kl"]) < ZERO
    assert abs(n["rewards/chosen"]) > 1e-4 and abs(n["rewards/rejected"]) > 1e-4
    assert same.metrics["first_step"]["rewards/chosen"] == s["rewards/chosen"]
    record = json.loads((same.output_dir / "wemask_run.json").read_text())
    assert record["stage"] == "kto" and record["options"]["ref_mask"] == "same"
    assert record["trl_config_class"] == "KTOConfig" and record["data_format"] == "prompt-completion-label"
    same.stage.installation.remove()
    assert masked_layers(same.trainer.model) == [] and masked_layers(same.trainer.ref_model) == []


def test_free_mode_and_r0_train_plain_kto(tmp_path, tiny_model_dir):
    r0 = train(tmp_path, "r0", tiny_model_dir, mask_rate=0.0)
    free = train(tmp_path, "free", tiny_model_dir, mask_rate=0.5, mode="free")
    aware = train(tmp_path, "aware", tiny_model_dir, mask_rate=0.5, ref_mask="none")
    assert free.metrics["masked_layers"] == {"policy": [], "reference": []}
    assert losses(free) == pytest.approx(losses(r0), abs=1e-6)
    assert losses(aware)[0] != pytest.approx(losses(r0)[0], abs=1e-5)
    assert WeMaskConfig.load(free.output_dir).mode == "free"


def test_lora_reference_is_the_adapter_disabled_policy(tmp_path, tiny_model_dir):
    result = train(tmp_path, "lora", tiny_model_dir, mask_rate=0.5, use_peft=True)
    assert result.metrics["reference"] == "adapter-disabled policy"
    assert result.metrics["masked_layers"] == {"policy": [1, 2, 3], "reference": None}
    assert abs(first(result)["rewards/chosen"]) < ZERO


def test_the_two_unpaired_layouts(tmp_path):
    dataset, fmt = load_training_data(UNPAIRED, FEEDBACK)
    assert fmt.name == "prompt-completion-label" and dataset.column_names == ["prompt", "completion", "label"]
    assert set(dataset["label"]) == {True, False}
    pairs, fmt = load_training_data(UNPAIRED, PREFS, split="train[:3]")
    assert fmt.name.startswith("prompt-chosen-rejected, unpaired") and pairs["label"] == [True, False] * 3
    rows = [json.loads(line) for line in Path(PREFS).read_text().splitlines()[:3]]
    assert pairs["completion"][:2] == [rows[0]["chosen"], rows[0]["rejected"]]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"prompt": "q", "completion": "a", "label": "no"}, {"prompt": "p", "completion": "c", "label": "yes"}],
         "line 1: 'label' is 'no', not true or false"),
        ([{"prompt": "q", "completion": "a", "label": False}, {"prompt": "p", "completion": "", "label": True}],
         "line 2: 'completion' is empty"),
        ([{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "p", "chosen": "c"}], "line 2 has no 'rejected'"),
        ([{"prompt": "q", "chosen": "a", "rejected": ""}], "line 1: 'rejected' is empty"),
    ],
    ids=["label-not-bool", "empty-completion", "pair-without-rejected", "pair-with-empty-rejected"],
)
def test_bad_rows_are_one_line_exit_2(monkeypatch, capsys, tmp_path, tiny_model_dir, rows, message):
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(WeMaskError, match=message):
        load_training_data(UNPAIRED, str(data))
    code, _, err = run_main(monkeypatch, capsys, "kto", "--model", tiny_model_dir, "--dataset", str(data), "-o", str(tmp_path / "o"))
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o" / "wemask_run.json").exists()


@pytest.mark.parametrize("label", [True, False])
def test_one_label_only_trains_with_one_line_instead_of_trls_weight_advice(monkeypatch, capsys, caplog, tmp_path, tiny_model_dir, label):
    rows = [json.loads(line) for line in Path(FEEDBACK).read_text().splitlines()[:4]]
    data = tmp_path / "one-sided.jsonl"
    data.write_text("".join(json.dumps({**row, "label": label}) + "\n" for row in rows))
    code, _, err = run_main(monkeypatch, capsys, "kto", "--model", tiny_model_dir, "--dataset", str(data), "-o", str(tmp_path / "o"),
                            "-r", "0.3", "--me-layer", "1", "--max-steps", "1", "--per-device-train-batch-size", "2", "--max-length", "64",
                            "--report-to", "none", "--save-strategy", "no")  # fmt: skip
    assert code == 0, err
    side, other = ("true (desirable)", "false (undesirable)") if label else ("false (undesirable)", "true (desirable)")
    said = [line for line in err.splitlines() if "labelled" in line or "desirable_weight" in line]
    assert said == [f"wemask: warning: kto: all 4 training rows are labelled {side}, none {other}: KTO trains on one side only "
                    "(TRL's advice on --desirable-weight/--undesirable-weight does not apply then, and is left out); add rows "
                    f"labelled {other.split()[0]} for the usual KTO"], err
    assert not [record for record in caplog.records if "desirable/positive" in record.getMessage()]  # TRL's logger


@pytest.mark.embedded
def test_embedded_model_kto_from_the_cli_masks_policy_and_reference(monkeypatch, capsys, tmp_path, embedded_dir):
    out = tmp_path / "kto"
    code, _, err = run_main(
        monkeypatch, capsys, "kto", "--dataset", FEEDBACK, "-o", str(out), "--mask-rate", "0.3", "--max-steps", "2",
        "--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-length", "128", "--learning-rate", "1e-5",
        "--report-to", "none", "--save-strategy", "no", "--seed", "0",
    )  # fmt: skip
    assert code == 0, err
    assert "kto reference (separate model): masked like the policy (--ref-mask same)" in err
    metrics = json.loads((out / "metrics.json").read_text())
    record = json.loads((out / "wemask_run.json").read_text())
    saved = WeMaskConfig.load(out)
    assert saved.mode == "aware" and record["wemask"]["mode"] == "aware" and record["options"]["ref_mask"] == "same"
    layers = list(range(saved.me_layer, 30))  # SmolLM2-135M: 30 layers, masked from the ME layer on
    assert metrics["masked_layers"] == {"policy": layers, "reference": layers}
    assert metrics["global_step"] == 2 and metrics["reference"] == "separate model"
    assert abs(metrics["first_step"]["rewards/chosen"]) < 1e-4 and abs(metrics["first_step"]["rewards/rejected"]) < 1e-4
