"""What a saved run folder carries is checked before it is applied: wemask_config.json and interventions.json must
agree, and interventions.json's weights path stays inside the folder."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import make_tiny_model, run_main

from wemask_cli.interventions import INTERVENTIONS_FILE, WEIGHTS_FILE, WeMask, install_all, load_saved, save_interventions
from wemask_cli.interventions.gated_norm import GatedNorm
from wemask_cli.interventions.saved import save_configs
from wemask_cli.method.config import CONFIG_NAME, WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError


def test_a_wemask_config_that_disagrees_with_interventions_is_one_line(tmp_path, tiny_model_dir, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run)
    save_configs(run, [WeMask(WeMaskConfig(mask_rate=0.3, me_layer=1))])
    assert load_saved(run).wemask.mask_rate == 0.3
    edited = json.loads((run / CONFIG_NAME).read_text())
    edited["mask_rate"] = 0.9
    (run / CONFIG_NAME).write_text(json.dumps(edited))
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(run), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert f"{run / CONFIG_NAME} and interventions.json beside it disagree about WeMask (mask_rate 0.9 vs 0.3" in line, line


@pytest.mark.parametrize("weights", ["../x.safetensors", "/etc/hostname", "sub/w.safetensors", ".."])
def test_intervention_weights_stay_inside_their_folder(tmp_path, weights):
    run = tmp_path / "run"
    save_interventions(run, install_all(make_tiny_model("llama"), [GatedNorm(rank=2)]))
    shutil.copy(run / WEIGHTS_FILE, tmp_path / "x.safetensors")
    record = json.loads((run / INTERVENTIONS_FILE).read_text())
    record["weights"] = weights
    (run / INTERVENTIONS_FILE).write_text(json.dumps(record))
    with pytest.raises(WeMaskError, match='"weights" is .* not a file name in its folder'):
        load_saved(run)


def truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_adapter_or_model_is_one_line_naming_the_file(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import transformers
    from peft import LoraConfig, get_peft_model

    adapter = tmp_path / "adapter"
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)
    truncate(adapter / "adapter_model.safetensors")
    full = tmp_path / "full"
    shutil.copytree(tiny_model_dir, full)
    truncate(full / "model.safetensors")
    for model, named in ((adapter, adapter / "adapter_model.safetensors"), (full, full)):
        code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(model), "-p", "hi", "--max-new-tokens", "2")
        line = err.strip().splitlines()[-1]
        assert code == 2 and "Traceback" not in err and str(named) in line and "network" not in line, err
        assert "truncated" in line


def test_a_failed_eval_removes_the_default_folder_it_created(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """A failed `wemask eval` without --output left runs/eval/TASK-TIME/ holding only .wemask-manifest.json."""
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--data", str(empty))
    assert code == 2 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]
