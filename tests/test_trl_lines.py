"""TRL's own GRPO and SFT command lines run unchanged: --reward_funcs with TRL's reward names on TRL's
prompt/solution data, output_dir defaulting to trainer_output, --eval_strategy without an eval set."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main

SFT_DATA = str(Path(__file__).resolve().parents[1] / "data" / "sft_chat.jsonl")
SHORT = ("--max-steps", "1", "--per-device-train-batch-size", "2", "--report-to", "none", "--save-strategy", "no")
GRPO = ("--num-generations", "2", "--max-completion-length", "8", *SHORT)


def solution_data(folder: Path) -> Path:
    """TRL's math data layout: prompt and solution."""
    path = folder / "solutions.jsonl"
    rows = [{"prompt": f"What is {a} + {b}?", "solution": str(a + b)} for a, b in ((2, 2), (3, 4), (5, 1), (2, 5))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_trl_grpo_line_with_reward_funcs_and_solution_column(monkeypatch, capsys, tmp_path, tiny_model_dir):
    data = str(solution_data(tmp_path))
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--model_name_or_path", tiny_model_dir, "--dataset_name", data,
                            "--reward_funcs", "accuracy_reward", "think_format_reward", "--output_dir", str(tmp_path / "trl"), *GRPO)  # fmt: skip
    assert code == 0, err
    metrics = json.loads((tmp_path / "trl" / "metrics.json").read_text())
    assert metrics["rewards"] == ["accuracy_reward", "think_format_reward"]
    assert set(metrics["final_reward_per_function"]) == {"accuracy_reward", "think_format_reward"}
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--model", tiny_model_dir, "--dataset", data, "--reward", "math",
                            "-o", str(tmp_path / "math"), *GRPO)  # fmt: skip
    assert code == 0, err  # `solution` is the math reward's answer column
    assert json.loads((tmp_path / "math" / "metrics.json").read_text())["rewards"] == ["math_reward"]


def test_output_dir_defaults_to_trainer_output_as_in_trl(monkeypatch, capsys, tmp_path, tiny_model_dir):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", SFT_DATA, "--max-length", "32", *SHORT)
    assert code == 0, err
    assert json.loads(Path("trainer_output/metrics.json").read_text())["stage"] == "sft"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", SFT_DATA, "--max-length", "32", *SHORT)
    assert code == 2 and "trainer_output" in err.splitlines()[-1] and "--overwrite" in err and "Traceback" not in err


def test_eval_strategy_without_an_eval_set_names_trls_test_split(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """TRL evaluates on --dataset's dataset_test_split; a local file has none. The line said '--eval-dataset', never given."""
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", SFT_DATA, "--eval_strategy", "steps",
                            "--eval_steps", "1", "-o", str(tmp_path / "o"), *SHORT)  # fmt: skip
    assert code == 2 and "Traceback" not in err
    line = err.splitlines()[-1]
    assert "--eval-strategy steps evaluates, as in TRL, on the 'test' split of --dataset" in line and "--eval-split" in line
    assert not (tmp_path / "o").exists()
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", SFT_DATA, "--eval_strategy", "steps",
                            "--eval_steps", "1", "--eval-split", "train[-4:]", "--max-length", "32", "-o", str(tmp_path / "o"), *SHORT)  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["eval_loss"] is not None


def test_trls_datasets_mixture_recipe_key(monkeypatch, capsys, tmp_path, tiny_model_dir):
    """TRL's `datasets:` key (DatasetMixtureConfig): entries read as --dataset is (ShareGPT adapted too), fractions as
    TRL's get_dataset keeps them, test_split_size held out as the eval set."""
    sharegpt = tmp_path / "sharegpt.jsonl"
    rows = [{"conversations": [{"from": "human", "value": f"Say {n}."}, {"from": "gpt", "value": f"{n}."}]} for n in range(30)]
    sharegpt.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = tmp_path / "mix.yaml"
    recipe.write_text(f"datasets:\n  - path: {SFT_DATA}\n    fraction: 0.5\n  - path: {sharegpt}\n    split: 'train[:20]'\n"
                      "    fraction: 0.5\ntest_split_size: 0.25\neval_strategy: steps\neval_steps: 1\n")  # fmt: skip
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--config", str(recipe), "--max-length", "32",
                            "-o", str(tmp_path / "o"), *SHORT)  # fmt: skip
    assert code == 0, err
    assert "sft: 30 examples (messages)" in err  # 20 + 20 rows (the smaller part caps the shares), 10 held out
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["eval_loss"] is not None and metrics["dataset"] == f"{SFT_DATA} + {sharegpt}"
    recipe.write_text(f"datasets:\n  - path: {SFT_DATA}\n    data_files: x.json\n")
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--config", str(recipe), "-o", str(tmp_path / "p"), *SHORT)
    assert code == 2 and "datasets entry 1: ['data_files'] are not read by wemask" in err and "Traceback" not in err


def test_trls_reward_funcs_recipe_key_is_reward(tmp_path):
    from wemask_cli.train.grpo import GRPOStage
    from wemask_cli.train.options import TrainOptions
    from wemask_cli.train.resolve import resolve

    recipe = tmp_path / "grpo.yaml"
    recipe.write_text("reward_funcs:\n  - accuracy_reward\n  - think_format_reward\n")
    stage = GRPOStage()
    resolved = resolve(stage, TrainOptions(config=str(recipe), output_dir=str(tmp_path / "o"), dataset="d.jsonl"), [])
    stage.check(resolved)
    assert resolved.opts["reward"] == ["accuracy_reward", "think_format_reward"] and resolved.args.reward_weights == [1.0, 1.0]
    assert [reward.__name__ for reward in stage.rewards] == ["accuracy_reward", "think_format_reward"]
