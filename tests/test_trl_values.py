"""Every TRL value (recipe key or flag) is checked against its TRL config field's type before any folder is claimed
or model loads: NaN and infinity refused, integers integers, quoted numbers refused, report_to integrations known and
installed, a recipe key given in both spellings a duplicate, a key that is not a name refused; one line each."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import run_main

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.resolve import resolve
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")


def resolve_recipe(tmp_path, text: str, *flags: str):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    return resolve(SFTStage(), TrainOptions(config=str(recipe), output_dir=str(tmp_path / "o")), list(flags))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_steps: .nan\n", r"line 1: max_steps must be an integer, not nan"),
        ("seed: 1.5\n", r"line 1: seed must be an integer, not 1.5"),
        ("learning_rate: .inf\n", r"line 1: learning_rate must be a finite number, not inf"),
        ("max_steps: null\n", r"line 1: max_steps must be an integer, not null"),
        ("report_to: [nosuch]\n", r"line 1: report_to 'nosuch' is not an integration transformers knows"),
        ("report_to: [none, 5]\n", r"line 1: report_to must be a string, not \['none', 5\]"),
        ("[a, b]: 1\n", r"line 1: a key must be an option name, not a list"),
        ("max_steps: 1\nmax-steps: 2\n", r"line 2: 'max-steps' repeats 'max_steps' \(line 1\)"),
        ('max_steps: "3"\n', r"line 1: max_steps must be a number, not the text '3': write it without quotes"),
        ("learning_rate: '2e-5'\n", r"line 1: learning_rate must be a number, not the text '2e-5'"),
        ("lr_scheduler_kwargs: {[x]: 1}\n", r"line 1: not valid YAML \(a key must be a name, not a list\)"),
    ],
)
def test_wrong_typed_recipe_values_are_one_line_before_the_model_loads(tmp_path, text, message):
    with pytest.raises(WeMaskError, match=message):
        resolve_recipe(tmp_path, text)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learning-rate", "nan"], r"--learning-rate: learning_rate must be a finite number, not nan"),
        (["--max-grad-norm", "inf"], r"--max-grad-norm: max_grad_norm must be a finite number, not inf"),
        (["--max-steps", "None"], r"--max-steps: max_steps must be an integer, not null"),
        (["--report-to", "nosuch"], r"--report-to: report_to 'nosuch' is not an integration"),
    ],
)
def test_wrong_typed_trl_flags_are_one_line(tmp_path, flags, message):
    with pytest.raises(WeMaskError, match=message):
        resolve_recipe(tmp_path, "", *flags)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_an_integration_that_is_not_installed_is_named(tmp_path):
    with pytest.raises(WeMaskError, match=r"line 1: report_to 'wandb' is not installed here"):
        resolve_recipe(tmp_path, "report_to: [wandb]\n")
    with pytest.raises(WeMaskError, match=r"--report-to: report_to 'wandb' is not installed here"):
        resolve_recipe(tmp_path, "", "--report-to", "wandb")


def test_well_typed_values_still_resolve(tmp_path):
    resolved = resolve_recipe(
        tmp_path, "learning_rate: 2e-5\nmax_steps: 3\nmax_length: null\nreport_to: none\nsave_steps: 0.5\nwarmup_steps: 2\n",
        "--seed", "4", "--num-train-epochs", "2",
    )  # fmt: skip
    args = resolved.args
    assert (args.learning_rate, args.max_steps, args.max_length, args.save_steps, args.seed) == (2e-5, 3, None, 0.5, 4)
    assert args.report_to in ([], "none", ["none"])


def test_the_cli_refuses_on_one_line_and_claims_no_folder(monkeypatch, capsys, tmp_path, tiny_model_dir):
    recipe = tmp_path / "r.yaml"
    for text in ("max_steps: .nan\n", "seed: 1.5\n", "[a, b]: 1\n", "max_steps: 1\nmax-steps: 2\n", 'max_steps: "3"\n'):
        recipe.write_text(text)
        code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA,
                                  "-o", str(tmp_path / "o"), "--config", str(recipe), "--report-to", "none")  # fmt: skip
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (text, err)
        assert not (tmp_path / "o").exists(), text
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "-o", str(tmp_path / "o"),
                            "--learning-rate", "nan")  # fmt: skip
    assert code == 2 and "learning_rate must be a finite number" in err and not (tmp_path / "o").exists()
