"""The intervention extension point: a kind declared outside the package (tests/toy_scale_norm.py) and installed as a
plugin (entry-point group `wemask.interventions`) gets its flags in `wemask sft --help`, trains in `wemask sft`, is
saved with the run and is re-applied by `wemask infer`, with no edit inside wemask_cli."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from plugin_support import plugin_site, wemask, wemask_each
from safetensors.torch import load_file

from wemask_cli.interventions import INTERVENTIONS_FILE, WEIGHTS_FILE, configs_from_options, flag_specs, install_all, kinds
from wemask_cli.interventions.registry import KINDS
from wemask_cli.interventions.wemask import FLAGS as WEMASK_FLAGS

TESTS = Path(__file__).resolve().parent
DATA = str(TESTS.parent / "data" / "sft_chat.jsonl")


def declaring(folder: Path, target: str) -> Path:
    """A site folder holding the metadata of an installed distribution that declares `scale_norm = target`."""
    return plugin_site(folder, "wemask.interventions", f"scale_norm = {target}")


@pytest.fixture
def toy(monkeypatch):
    """tests/toy_scale_norm.py imported afresh in this process (registers `scale_norm`); the registry restored after."""
    monkeypatch.delitem(sys.modules, "toy_scale_norm", raising=False)
    with KINDS.restoring():  # the built-in kinds registered first, the registry restored after
        import toy_scale_norm

        yield toy_scale_norm


def test_a_toy_kind_gets_flags_from_its_fields_and_starts_as_the_identity(toy):
    specs = {spec.name: spec for spec in flag_specs()}
    assert (specs["--scale-norm"].type, specs["--scale-norm-layers"].default) == (bool, "all")
    assert configs_from_options({"scale_norm": True, "scale_norm_layers": "1:"}) == [toy.ScaleNorm(layers="1:")]
    with pytest.raises(ValueError, match="--scale-norm-layers needs --scale-norm"):
        configs_from_options({"scale_norm_layers": "1:"})
    model = make_tiny_model("llama")
    ids = torch.arange(8).unsqueeze(0)
    plain = model(ids).logits
    with install_all(model, [toy.ScaleNorm()]) as installation:
        assert torch.equal(model(ids).logits, plain)  # s = 1 at step 0
        assert [tuple(p.shape) for p in installation.parameters()] == [(1,)] * model.config.num_hidden_layers
        installation.parameters()[0].data.fill_(2.0)
        assert not torch.equal(model(ids).logits, plain)
    assert torch.equal(model(ids).logits, plain)


def test_builtin_flags_and_their_defaults_come_from_the_config_fields():
    for cls in (kind for kind in kinds().values() if not kind.everywhere):  # WeMask's flags are its FLAGS, not fields
        instance = cls()
        for spec in cls.flags()[1:]:  # the main flag turns the kind on; the others set one field each
            name = spec.name.removeprefix(cls.flag_name() + "-").replace("-", "_")
            assert spec.default == getattr(instance, name) and cls.flag_name(name) == spec.name
    assert [spec.name for spec in kinds()["gated_attention"].flags()][:2] == ["--gated-attention", "--gated-attention-rank"]
    assert kinds()["gated_norm"].flags()[0].choices == ("attn", "ffn", "both") and kinds()["wemask"].flags() == list(WEMASK_FLAGS)


def test_a_plugin_kind_shows_in_help_trains_saves_and_is_reapplied_by_infer(tmp_path, tiny_model_dir):
    site = declaring(tmp_path / "site", "toy_scale_norm")
    helped = wemask(site, "sft", "--help", blocked=True)  # torch-free, the plugin included
    assert helped.returncode == 0, helped.stderr
    assert "--scale-norm" in helped.stdout and "--no-scale-norm" in helped.stdout
    assert "or :b (default all)." in helped.stdout.split("--scale-norm-layers")[1].splitlines()[0]

    run = tmp_path / "run"
    trained, inferred = wemask_each(  # one process: the run, then infer on it
        site,
        ["sft", "--model", tiny_model_dir, "--dataset", DATA, "-o", str(run), "--scale-norm", "--scale-norm-layers", "2:",
         "--per-device-train-batch-size", "2", "--max-length", "64", "--learning-rate", "1e-2", "--max-steps", "2",
         "--report-to", "none", "--seed", "0"],
        ["infer", "--model", str(run), "-p", "hi", "--max-new-tokens", "2"],
    )  # fmt: skip
    assert trained[0] == 0, trained[2][-3000:]
    record = json.loads((run / INTERVENTIONS_FILE).read_text())
    assert [entry["kind"] for entry in record["interventions"]] == ["wemask", "scale_norm"]
    assert record["interventions"][1]["layers"] == "2:"
    weights = load_file(str(run / WEIGHTS_FILE))
    assert sorted(weights) == ["scale_norm.2.attn.weight", "scale_norm.3.attn.weight"]  # the tiny Llama's layers 2, 3
    assert all(value.item() != 1.0 for value in weights.values())  # s starts at 1: it trained

    assert inferred[0] == 0, inferred[2][-3000:]
    assert "ScaleNorm on the attention norms, layers 2: (0-based)" in inferred[1] + inferred[2]

    without = wemask(None, "infer", "--model", str(run), "-p", "hi", "--max-new-tokens", "2")
    assert without.returncode == 2 and "unknown intervention kind 'scale_norm'" in without.stderr, without.stderr
    assert without.stderr.count("\n") == 1


def test_a_broken_plugin_is_left_out_with_one_warning(tmp_path):
    done = wemask(declaring(tmp_path / "site", "no_such_module_here"), "sft", "--help", blocked=True)
    assert done.returncode == 0 and "--gated-norm" in done.stdout, done.stderr
    assert done.stderr.count("\n") == 1 and "intervention plugin scale_norm = 'no_such_module_here'" in done.stderr
