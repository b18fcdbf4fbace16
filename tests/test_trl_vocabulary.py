"""A TRL user's flags and recipes work unchanged: ScriptArguments/ModelConfig names, both spellings, space lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.train.trl_vocabulary import trl_spellings

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def test_spellings_and_space_separated_lists():
    own = {"--lora-r", "--lora-target-modules", "--model-name-or-path", "--use-peft"}
    assert trl_spellings(
        ["--lora_r", "8", "--lora-target-modules", "q_proj", "v_proj", "--max_steps", "1", "--use_peft",
         "--lora_target_modules=a,b", "--model_name_or_path", "x"], own,
    ) == ["--lora-r", "8", "--lora-target-modules", "q_proj,v_proj", "--max_steps", "1", "--use-peft",
          "--lora-target-modules=a,b", "--model-name-or-path", "x"]


def snapshot(tmp_path: Path, source: str) -> str:
    """A hub-snapshot-like folder with a train and a test split (TRL's scripts evaluate on `test`)."""
    folder = tmp_path / "data"
    folder.mkdir()
    lines = (DATA / source).read_text().splitlines()
    (folder / "train.jsonl").write_text("\n".join(lines[:8]) + "\n")
    (folder / "test.jsonl").write_text("\n".join(lines[8:10]) + "\n")
    return str(folder)


def test_trl_sft_recipe_runs_unchanged(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "sft"
    code, _, err = run_main(
        monkeypatch, capsys, "sft", "--config", str(HERE / "trl_recipes" / "sft_capybara.yaml"),
        "--model_name_or_path", tiny_model_dir, "--dataset_name", snapshot(tmp_path, "sft_chat.jsonl"),
        "--output_dir", str(out), "--max_steps", "1", "--max_length", "32", "--mask-rate", "0.3", "--me_layer", "1",
    )
    assert code == 0, err
    record = json.loads((out / "wemask_run.json").read_text())
    settings, source = record["options"], record["set_by"]
    assert settings["model"] == tiny_model_dir and source["wemask"]["model"] == "flag"
    assert settings["lora_r"] == 32 and source["wemask"]["lora_r"] == "recipe"
    assert settings["eval_dataset"] and settings["eval_split"] == "test"  # eval_strategy steps: TRL's test split
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"] and adapter["r"] == 32
    assert "eval_loss" in json.loads((out / "metrics.json").read_text())


def test_trl_dpo_recipe_and_model_config_flags(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "dpo"
    code, _, err = run_main(
        monkeypatch, capsys, "dpo", "--config", str(HERE / "trl_recipes" / "dpo_ultrafeedback.yaml"),
        "--model-name-or-path", tiny_model_dir, "--dataset-name", str(DATA / "preferences.jsonl"), "--output-dir", str(out),
        "--max-steps", "1", "--max-length", "64", "--lora-target-modules", "q_proj", "v_proj", "--lora_modules_to_save",
        "lm_head", "--use_dora", "--attn_implementation", "eager", "--report-to", "none",
    )
    assert code == 0, err
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert adapter["use_dora"] is True and adapter["use_rslora"] is True and adapter["modules_to_save"] == ["lm_head"]


@pytest.mark.parametrize(("args", "message"), [
    (["--bnb-4bit-quant-type", "nf5", "--load-in-4bit", "--use-peft"], "--bnb-4bit-quant-type 'nf5' is not valid"),
    (["--lora-modules-to-save", "nothing_here", "--use-peft"], "--lora-modules-to-save: nothing_here is not a module"),
])
def test_bad_model_config_values_are_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir, args, message):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", str(DATA / "sft_chat.jsonl"),
                            "-o", str(tmp_path / "o"), "--max-steps", "1", *args)
    assert code == 2 and "Traceback" not in err and message in err.splitlines()[-1], err


def test_a_recipe_key_and_its_trl_alias_are_a_duplicate(monkeypatch, capsys, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: a\nmax_steps: 1\nmodel_name_or_path: b\n")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--config", str(recipe), "-o", str(tmp_path / "o"))
    assert code == 2 and "line 3: 'model_name_or_path' repeats 'model' (line 1)" in err, err
