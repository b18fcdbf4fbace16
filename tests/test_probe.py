"""`wemask probe`: each causal probe of the ME layer edits what it says and restores the model after, the probes
that do not apply to a family are refused (or skipped), bad input is one line, a plugin probe is one file, and the
command runs on the embedded model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_tiny_model, make_tiny_tokenizer, run_main
from plugin_support import plugin_site, wemask

from wemask_cli.method.arch import effective_scale, resolve_layers
from wemask_cli.method.batch import pad, positions_of
from wemask_cli.probes.base import ProbeContext, ProbeSettings
from wemask_cli.probes.permute_norm import permutation
from wemask_cli.probes.registry import PROBES
from wemask_cli.probes.run import run_probes
from wemask_cli.probes.swap_layers import swap_parameters

ME = 1
IDS = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17], [3, 4, 5, 6, 7]]
EMBEDDED_ME = 11


def tiny(arch: str = "llama"):
    """A tiny model whose norms have spread weights (a random model's are all 1: permuting them would do nothing)."""
    model = make_tiny_model(arch)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(torch.rand(param.shape, generator=generator) * 1.5 + 0.25)
    return model


def context(model, **settings) -> ProbeContext:
    parts = resolve_layers(model)
    direction = torch.nn.functional.normalize(torch.randn(parts[0].layer.self_attn.o_proj.out_features), dim=0)
    return ProbeContext(model, parts, ME, ProbeSettings(**settings), direction, [len(row) for row in IDS])


def forward(model, capture=None):
    """The hidden states of every layer of IDS (right-padded), with `capture` ((module, list)) recording an output."""
    ids, mask = pad(IDS, 0)
    handle = None
    if capture is not None:
        module, outputs = capture
        handle = module.register_forward_hook(lambda _m, args, out: outputs.append((args, out[0] if isinstance(out, tuple) else out)))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions_of(mask), output_hidden_states=True)
    finally:
        if handle is not None:
            handle.remove()
    return torch.stack(out.hidden_states)


def snapshot(model) -> dict:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def same(before: dict, model) -> bool:
    return all(torch.equal(before[name], param) for name, param in model.named_parameters())


@pytest.mark.parametrize("name", ["permute-norm", "uniform-norm", "zero-ffn", "down-svd", "patch", "swap-layers"])
def test_each_probe_changes_the_me_layer_and_restores_the_model(name):
    model = tiny()
    before, plain = snapshot(model), forward(model)
    with PROBES.get(name)().applied(context(model)):
        probed = forward(model)
    # hidden_states[l + 1] is recorded by transformers' own hook on layer l, before a probe's hook on that layer's
    # output: the layer after the ME layer shows every probe's edit
    assert not torch.allclose(probed[ME + 2, :, 0], plain[ME + 2, :, 0]), "the first token's state must change"
    edited = 0 if name == "swap-layers" else ME  # swapped with layer 0
    assert torch.equal(probed[: edited + 1], plain[: edited + 1]), "nothing before the edited layers changes"
    assert same(before, model) and torch.equal(forward(model), plain), "the model is restored after the block"


def test_permutation_is_seeded_and_permutes_the_norm():
    assert torch.equal(permutation(64, 3), permutation(64, 3)) and not torch.equal(permutation(64, 3), permutation(64, 4))
    model = tiny()
    weight = resolve_layers(model)[ME].ffn_norm.weight
    original = weight.detach().clone()
    with PROBES.get("permute-norm")().applied(context(model, seed=3)):
        assert torch.equal(weight.detach(), original[permutation(64, 3)])


def test_uniform_norm_changes_only_the_first_token():
    model = tiny()
    part = resolve_layers(model)[ME]
    outputs = []
    forward(model, (part.ffn_norm, outputs))
    with PROBES.get("uniform-norm")().applied(context(model)):
        forward(model, (part.ffn_norm, outputs))
    (args, plain), (_, probed) = outputs
    x = args[0][:, 0].float()
    scale = effective_scale(part.ffn_norm, 0.0).pow(2).mean().sqrt()
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + part.ffn_norm.variance_epsilon) * scale
    assert torch.allclose(probed[:, 0], expected, atol=1e-5)
    assert torch.equal(probed[:, 1:], plain[:, 1:]) and not torch.allclose(probed[:, 0], plain[:, 0])


def test_zero_ffn_zeroes_the_first_tokens_ffn_output_alone():
    model = tiny()
    outputs = []
    with PROBES.get("zero-ffn")().applied(context(model)):
        forward(model, (resolve_layers(model)[ME].ffn, outputs))
    (_, out), = outputs
    assert torch.count_nonzero(out[:, 0]) == 0 and bool((out[:, 1:].abs().sum(-1) > 0).all())


def test_down_svd_removes_the_top_singular_directions():
    model = tiny()
    weight = resolve_layers(model)[ME].ffn.down_proj.weight
    sigma = torch.linalg.svdvals(weight.detach().double())
    with PROBES.get("down-svd")().applied(context(model, top_k=2)) as details:
        left = torch.linalg.svdvals(weight.detach().double())
    assert torch.allclose(left[:-2], sigma[2:], rtol=1e-4) and details["energy_removed"] == pytest.approx(float(sigma[:2].pow(2).sum() / sigma.pow(2).sum()))


def test_patch_moves_the_massive_component_to_the_patch_position():
    model = tiny()
    layer, plain, probed = resolve_layers(model)[ME].layer, [], []
    forward(model, (layer, plain))
    ctx = context(model, patch_position=2)
    with PROBES.get("patch")().applied(ctx):
        forward(model, (layer, probed))
    v, base, out = ctx.direction, plain[0][1], probed[0][1]
    component = base[:, 0] @ v
    assert torch.allclose(out[:, 0] @ v, torch.zeros(3), atol=1e-4)
    assert torch.allclose(out[:, 2] - base[:, 2], component[:, None] * v, atol=1e-4)
    assert torch.equal(out[:, 1], base[:, 1]) and torch.equal(out[:, 3:], base[:, 3:])


def test_swap_is_involutive_and_exchanges_the_layers():
    model = tiny()
    one, two = resolve_layers(model)[ME].layer, resolve_layers(model)[0].layer
    before = snapshot(model)
    swap_parameters(one, two)
    assert torch.equal(one.mlp.down_proj.weight, before["model.layers.0.mlp.down_proj.weight"])
    swap_parameters(one, two)
    assert same(before, model)


def test_run_probes_measures_every_probe_against_the_unmodified_model():
    model = tiny()
    before = snapshot(model)
    report = run_probes(model, IDS, me_layer=ME, mask_rates=[0.5], batch_size=2)
    base = report["unmodified"]
    assert [p["probe"] for p in report["probes"]] == list(PROBES.builtins()) and report["skipped"] == []
    for run in report["probes"]:
        assert run["first_norm"][ME] != base["first_norm"][ME], run["probe"]
        assert len(run["sink_mass"]) == len(run["sink_position"]) == len(run["diversity"]) == 4
        (masked,) = run["mask_rates"]
        assert masked["mask_rate"] == 0.5 and masked["diversity"] != run["diversity"]
    assert same(before, model)


@pytest.mark.parametrize(("arch", "name", "message"), [
    ("olmo2", "permute-norm", "has no norm before the FFN, which --probe permute-norm needs"),
    ("cohere2", "uniform-norm", "the norm before the FFN also feeds the attention"),
    ("qwen2_moe", "down-svd", "FFN is a mixture of experts"),
])  # fmt: skip
def test_a_probe_that_does_not_apply_is_refused_when_asked_and_skipped_otherwise(arch, name, message):
    from wemask_cli.runtime.errors import WeMaskError

    model = tiny(arch)
    with pytest.raises(WeMaskError, match=message):
        run_probes(model, IDS, names=[name], me_layer=ME)
    report = run_probes(model, IDS, me_layer=ME)
    assert message in next(s["reason"] for s in report["skipped"] if s["probe"] == name)
    assert name not in [p["probe"] for p in report["probes"]] and report["probes"]


@pytest.fixture(scope="module")
def olmo2_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-olmo2")
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model("olmo2", vocab_size=len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize(("case", "message"), [
    ("family", "has no norm before the FFN, which --probe permute-norm needs"),
    ("patch", "--patch-position 40 is beyond a prompt: the shortest has"),
    ("swap-me", "--swap-with 1 is the ME layer itself"),
    ("swap-range", "--swap-with 9 is outside"),
    ("me-range", "--me-layer 4 is outside"),
    ("unknown", "--probe 'nope' is unknown: use one of permute-norm"),
    ("top-k", "--top-k 500 is out of range"),
    ("no-me", "no ME layer found on these prompts"),
    ("plot", "give a file name ending in .png"),
])  # fmt: skip
def test_cli_bad_input_exits_2_with_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir, olmo2_dir, case, message):
    prompts = tmp_path / "p.txt"
    prompts.write_text("The quick brown fox jumps.\nWhat is 12 plus 30?\n")
    args = {
        "family": ["--model", olmo2_dir, "--me-layer", "1", "--probe", "permute-norm"],
        "patch": ["--me-layer", "1", "--probe", "patch", "--patch-position", "40"],
        "swap-me": ["--me-layer", "1", "--swap-with", "1"],
        "swap-range": ["--me-layer", "1", "--swap-with", "9"],
        "me-range": ["--me-layer", "4"],
        "unknown": ["--me-layer", "1", "--probe", "nope"],
        "top-k": ["--me-layer", "1", "--probe", "down-svd", "--top-k", "500"],
        "no-me": ["--probe", "zero-ffn"],
        "plot": ["--plot", str(tmp_path / "p.jpg")],
    }[case]
    model = [] if case == "family" else ["--model", tiny_model_dir]
    code, _, err = run_main(monkeypatch, capsys, "probe", *model, "--prompts", str(prompts), *args)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("wemask: error: ") and message in err, err


def test_a_probe_plugin_is_one_file(tmp_path, tiny_model_dir):
    site = plugin_site(tmp_path / "site", "wemask.probes", "halve_first = toy_probe")
    out = tmp_path / "r.json"
    done = wemask(site, "probe", "--model", tiny_model_dir, "--me-layer", "1", "--probe", "halve-first", "--probe", "zero-ffn",
                  "--num-prompts", "2", "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    (halved, zeroed) = report["probes"]
    assert halved["probe"] == "halve-first" and halved["details"] == {"factor": 0.5} and zeroed["probe"] == "zero-ffn"
    assert halved["first_norm"][1] == pytest.approx(report["unmodified"]["first_norm"][1] / 2, rel=1e-4)


@pytest.mark.embedded
def test_cli_on_the_embedded_model(monkeypatch, capsys, tmp_path, embedded_dir):
    out_json, out_png = tmp_path / "r.json", tmp_path / "p.png"
    code, out, err = run_main(
        monkeypatch, capsys, "probe", "--model", embedded_dir, "--num-prompts", "2", "--max-length", "48",
        "--probe", "zero-ffn", "--probe", "swap-layers", "--json", str(out_json), "--plot", str(out_png),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out_json.read_text())
    assert report["me_layer"] == EMBEDDED_ME and report["me_layer_source"] == "located" and report["num_layers"] == 30
    base = report["unmodified"]
    assert base["sink_lands"] == 0 and base["located_me_layer"] == EMBEDDED_ME
    zeroed, swapped = report["probes"]
    assert zeroed["jump"] < base["jump"] and swapped["details"] == {"swap_with": EMBEDDED_ME - 1}
    assert "zero-ffn" in out and "unmodified" in out
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_layer_flags_are_checked_before_torch_is_imported(tiny_model_dir):
    done = wemask(None, "probe", "--model", tiny_model_dir, "--me-layer", "1", "--swap-with", "9", blocked=True)
    assert done.returncode == 2 and done.stderr.strip() == f"wemask: error: --swap-with 9 is outside {tiny_model_dir}: it has 4 layers, use 0..3 (0-based)"


def test_help_names_every_built_in_probe():
    from wemask_cli.cli.probe import PROBE_NAMES

    assert PROBE_NAMES == ", ".join(PROBES.builtins())


@pytest.mark.parametrize("arch", ["gemma3_text", "phi3", "qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_every_probe_that_applies_runs_and_restores_on_other_families(arch):
    model = tiny(arch)
    before = snapshot(model)
    report = run_probes(model, IDS, me_layer=ME)
    ran = [p["probe"] for p in report["probes"]] + [s["probe"] for s in report["skipped"]]
    assert sorted(ran) == sorted(PROBES.builtins()) and same(before, model)
    for run in report["probes"]:
        assert run["first_norm"] != report["unmodified"]["first_norm"], run["probe"]
    if arch == "deepseek_v3":  # layer 0 is dense, 1.. are MoE: the ME layer 1 swaps with the nearest MoE layer
        assert next(p for p in report["probes"] if p["probe"] == "swap-layers")["details"] == {"swap_with": 2}
