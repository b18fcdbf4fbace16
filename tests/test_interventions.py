"""The intervention seam and the sink paper's remedies (GatedNorm, PreAffine, gated attention) on tiny models."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from conftest import make_tiny_model

from wemask_cli.interventions import (
    INTERVENTIONS_FILE,
    WEIGHTS_FILE,
    WeMask,
    configs_from_options,
    flag_specs,
    install_all,
    load_saved,
    save_interventions,
)
from wemask_cli.interventions.gated_attention import GatedAttention
from wemask_cli.interventions.gated_norm import GatedNorm
from wemask_cli.interventions.pre_affine import PreAffine
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.config import CONFIG_NAME, WeMaskConfig
from wemask_cli.method.wemask_hook import masked_layers
from wemask_cli.runtime.errors import WeMaskError

IDS = torch.tensor([[5, 17, 42, 9, 33, 71, 8]])
REMEDIES = [GatedNorm(norms="both", rank=4), PreAffine(norms="both"), GatedAttention(rank=4)]
EVERYTHING = [WeMaskConfig(mask_rate=0.0, me_layer=1), *REMEDIES]


def logits(model, **kwargs):
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False, **kwargs).logits


def perturb(installation, seed=0):
    """Move every remedy parameter away from its identity start."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in installation.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=generator).to(p.dtype))


def test_every_remedy_starts_as_the_identity_and_remove_restores(arch):
    model = make_tiny_model(arch)
    plain = logits(model)
    count = len(list(model.parameters()))
    installation = install_all(model, EVERYTHING)
    assert [c.kind for c in installation.configs] == ["wemask", "gated_norm", "pre_affine", "gated_attention"]
    assert torch.equal(logits(model), plain)  # bitwise: W_up = 0 gives g = 2·σ(0) = 1 exactly, λ = 1
    perturb(installation)
    assert not torch.allclose(logits(model), plain, atol=1e-3)
    installation.remove()
    assert torch.equal(logits(model), plain)
    assert len(list(model.parameters())) == count and not any("wemask" in n for n, _ in model.named_modules())


@pytest.mark.parametrize("config", REMEDIES, ids=lambda c: c.kind)
def test_each_remedy_alone_changes_the_model_once_trained_and_gets_gradients(config):
    model = make_tiny_model("llama").train()
    plain = logits(model)
    with install_all(model, [config]) as installation:
        params = installation.parameters()
        assert params and all(p.requires_grad for p in params)
        assert {id(p) for p in params} <= {id(p) for p in model.parameters()}  # registered: optimizers see them
        model(input_ids=IDS, labels=IDS).loss.backward()
        assert all(p.grad is not None for p in params)
        assert sum(p.grad.abs().sum() for p in params) > 0
        perturb(installation)
        assert not torch.allclose(logits(model), plain, atol=1e-3)
    assert torch.equal(logits(model), plain)


def test_gated_attention_gates_the_o_proj_input_from_the_attention_input():
    model = make_tiny_model("qwen3")
    part = resolve_layers(model)[2]
    seen = {}
    installation = install_all(model, [GatedAttention(rank=4, layers="2:3")])
    part.attention.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("gated", a[0].detach().clone()))
    part.attention.o_proj.register_forward_pre_hook(
        lambda m, a: seen.__setitem__("raw", a[0].detach().clone()), prepend=True
    )
    part.attention.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("x", kw["hidden_states"].detach().clone()), with_kwargs=True
    )
    perturb(installation)
    logits(model)
    gate = part.layer.wemask_gated_attention
    expected = seen["raw"] * 2 * torch.sigmoid(seen["x"] @ gate.down.T @ gate.up.T)
    torch.testing.assert_close(seen["gated"], expected)
    assert not gate.swish and seen["raw"].shape[-1] == gate.up.shape[0] == 64  # heads x head_dim
    assert installation.configs[0].layers == "2:3" and not hasattr(resolve_layers(model)[1].layer, "wemask_gated_attention")


def test_gated_norm_formula_and_gemma_norm_sites():
    model = make_tiny_model("gemma2")
    part = resolve_layers(model)[1]
    outputs = {}
    installation = install_all(model, [GatedNorm(norms="ffn", rank=3, layers="1:")])
    part.ffn_norm.register_forward_hook(lambda m, a, out: outputs.__setitem__("y", out.detach().clone()), prepend=True)
    part.ffn_norm.register_forward_hook(lambda m, a, out: outputs.__setitem__("gated", out.detach().clone()))
    perturb(installation)
    logits(model)
    gate = part.layer.wemask_gated_norm_ffn
    y = outputs["y"]
    torch.testing.assert_close(outputs["gated"], y * 2 * torch.sigmoid(torch.nn.functional.silu(y @ gate.down.T) @ gate.up.T))
    assert part.ffn_norm is part.layer.pre_feedforward_layernorm  # Gemma: the pre-FFN norm, not post_attention
    assert sorted(installation.items[0].modules) == ["1.ffn", "2.ffn", "3.ffn"]


def test_pre_affine_scales_the_norm_input():
    model = make_tiny_model("llama")
    part = resolve_layers(model)[0]
    inputs = {}
    installation = install_all(model, [PreAffine(norms="attn", layers="0:1")])
    part.attn_norm.register_forward_pre_hook(lambda m, a: inputs.__setitem__("x", a[0].detach().clone()), prepend=True)
    part.attn_norm.register_forward_hook(lambda m, a, out: inputs.__setitem__("y", out.detach().clone()))
    perturb(installation)
    logits(model)
    scale = part.layer.wemask_pre_affine_attn.weight.detach().clone()
    installation.remove()
    with torch.no_grad():
        torch.testing.assert_close(inputs["y"], part.attn_norm(inputs["x"] * scale))


def test_active_predicate_turns_every_intervention_into_the_identity():
    model = make_tiny_model("llama")
    plain = logits(model)
    switch = {"on": True}
    installation = install_all(
        model, [WeMaskConfig(mask_rate=0.5, me_layer=1), *REMEDIES], active=lambda: switch["on"]
    )
    perturb(installation)
    changed = logits(model)
    switch["on"] = False
    assert torch.equal(logits(model), plain)
    switch["on"] = True
    assert torch.equal(logits(model), changed)


def test_gradient_checkpointing_is_exact_with_every_remedy(arch):
    model = make_tiny_model(arch).train()
    installation = install_all(model, [WeMaskConfig(mask_rate=0.5, me_layer=1), *REMEDIES])
    perturb(installation)

    def loss_and_grads():
        model.zero_grad()
        loss = model(input_ids=IDS, labels=IDS, use_cache=False).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loss_ckpt, grads_ckpt = loss_and_grads()
    torch.testing.assert_close(loss_ckpt, loss, atol=1e-6, rtol=0)
    assert any("wemask_gated_attention" in name for name in grads)
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], atol=1e-6, rtol=1e-5)


def test_lora_freezes_the_base_but_the_remedies_train():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_tiny_model("qwen2"), LoraConfig(r=4, target_modules="all-linear"))
    installation = install_all(model, REMEDIES)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("wemask_gated_norm_attn" in n for n in trainable) and any("lora_" in n for n in trainable)
    assert not any("wemask" in n and "lora" in n for n, _ in model.named_modules())  # gates are not LoRA targets
    before = [p.detach().clone() for p in installation.parameters()]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for _ in range(2):
        optimizer.zero_grad()
        model(input_ids=IDS, labels=IDS).loss.backward()
        optimizer.step()
    moved = [not torch.equal(b, p) for b, p in zip(before, installation.parameters())]
    assert any(moved)
    ups = [p for name, p in installation.state_dict().items() if name.endswith(".up")]
    assert all(p.abs().sum() > 0 for p in ups)  # every zero-initialised W_up left zero after training


def test_bfloat16_model_gets_bfloat16_remedies_on_its_device():
    model = make_tiny_model("llama").to(torch.bfloat16)
    plain = logits(model)
    installation = install_all(model, REMEDIES)
    assert {p.dtype for p in installation.parameters()} == {torch.bfloat16}
    assert torch.equal(logits(model), plain)


def test_saved_run_round_trip_with_weights(tmp_path):
    model = make_tiny_model("llama")
    installation = install_all(model, [WeMaskConfig(mask_rate=0.3, me_layer=1, mode="aware"), *REMEDIES])
    perturb(installation)
    expected = logits(model)
    written = save_interventions(tmp_path, installation)
    assert sorted(p.name for p in written) == sorted([WEIGHTS_FILE, INTERVENTIONS_FILE, CONFIG_NAME])
    assert not list(tmp_path.glob(".*tmp")), "temporary files left behind"
    record = json.loads((tmp_path / INTERVENTIONS_FILE).read_text())
    assert [e["kind"] for e in record["interventions"]] == ["wemask", "gated_norm", "pre_affine", "gated_attention"]
    assert record["interventions"][0]["dims"] and record["weights"] == WEIGHTS_FILE
    assert WeMaskConfig.load(tmp_path) == installation.wemask  # the legacy file, for older readers
    assert (tmp_path / WEIGHTS_FILE).read_bytes()[8:9] == b"{"  # safetensors: 8-byte length, then a JSON header

    saved = load_saved(tmp_path)
    assert saved.wemask == installation.wemask and [c.kind for c in saved.remedies] == ["gated_norm", "pre_affine", "gated_attention"]
    fresh = make_tiny_model("llama")
    again = saved.install(fresh)
    assert torch.equal(logits(fresh), expected)
    assert masked_layers(fresh) == [1, 2, 3]
    again.remove()
    assert masked_layers(fresh) == []


def test_plain_transformers_loads_the_base_without_the_remedies(tmp_path):
    """What the README says: the weights are in the checkpoint, transformers reports them UNEXPECTED and drops
    them; wemask's saved run restores them."""
    import transformers

    model = make_tiny_model("llama")
    plain = logits(model)
    installation = install_all(model, REMEDIES)
    perturb(installation)
    trained = logits(model)
    model.save_pretrained(tmp_path)
    save_interventions(tmp_path, installation)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(logits(reloaded), plain)
    load_saved(tmp_path).install(reloaded)
    assert torch.equal(logits(reloaded), trained)


def test_legacy_and_broken_saved_runs(tmp_path):
    assert load_saved(tmp_path) is None
    WeMaskConfig(mask_rate=0.3, me_layer=1).save(tmp_path)
    legacy = load_saved(tmp_path)
    assert legacy.source == CONFIG_NAME and legacy.wemask.mask_rate == 0.3 and legacy.remedies == []

    (tmp_path / CONFIG_NAME).write_text("{}")
    with pytest.raises(WeMaskError, match="has no 'mask_rate'"):
        load_saved(tmp_path)
    (tmp_path / CONFIG_NAME).write_text(json.dumps({"mask_rate": 0.3, "me_layer": 1, "dims": "all"}))
    with pytest.raises(WeMaskError, match="dims='all' is not valid"):
        load_saved(tmp_path)

    save_interventions(tmp_path / "run", install_all(make_tiny_model("llama"), [GatedNorm(rank=2)]))
    (tmp_path / "run" / WEIGHTS_FILE).unlink()
    with pytest.raises(WeMaskError, match="interventions.safetensors is missing"):
        load_saved(tmp_path / "run")
    (tmp_path / "run" / INTERVENTIONS_FILE).write_text('{"format": "wemask-interventions", "version": 1, "interventions": [{"kind": "magic"}]}')
    with pytest.raises(WeMaskError, match="unknown intervention kind 'magic'"):
        load_saved(tmp_path / "run")
    (tmp_path / "run" / INTERVENTIONS_FILE).write_text("{not json")
    with pytest.raises(WeMaskError, match="is not valid JSON"):
        load_saved(tmp_path / "run")


def test_weights_that_do_not_fit_are_refused(tmp_path):
    save_interventions(tmp_path, install_all(make_tiny_model("llama"), [GatedNorm(rank=2)]))
    saved = load_saved(tmp_path)
    with pytest.raises(WeMaskError, match="missing"):
        install_all(make_tiny_model("llama"), [GatedNorm(rank=2, layers="0:2")], weights=saved.weights)
    model = make_tiny_model("llama")
    with pytest.raises(WeMaskError, match="has shape"):
        install_all(model, [GatedNorm(rank=3)], weights=saved.weights)
    assert not any("wemask" in n for n, _ in model.named_modules()), "a failed install must leave nothing behind"


def test_flags_and_options():
    names = [spec.name for spec in flag_specs()]
    assert names[:3] == ["--gated-norm", "--gated-norm-rank", "--gated-norm-layers"] and len(set(names)) == len(names)
    assert {spec.dest for spec in flag_specs()} >= {"gated_norm", "pre_affine", "gated_attention", "gated_attention_rank"}
    assert configs_from_options({}) == [] and configs_from_options({"gated_norm": "none", "gated_norm_rank": 16}) == []
    configs = configs_from_options(
        {"gated_norm": "attn", "gated_norm_rank": 8, "gated_norm_layers": "2:", "gated_attention": True, "pre_affine": None}
    )
    assert configs == [GatedNorm(norms="attn", rank=8, layers="2:"), GatedAttention()]
    assert configs_from_options({"gated_norm": "ffn", "gated_norm_rank": "8", "gated_attention": "false"}) == [
        GatedNorm(norms="ffn", rank=8)
    ]  # recipe values may be strings
    with pytest.raises(WeMaskError, match="--gated-norm-rank 'eight' is not a whole number"):
        configs_from_options({"gated_norm": "ffn", "gated_norm_rank": "eight"})
    with pytest.raises(WeMaskError, match="--gated-norm-rank needs --gated-norm"):
        configs_from_options({"gated_norm_rank": 4})
    with pytest.raises(WeMaskError, match="norms='everywhere' is unknown"):
        configs_from_options({"pre_affine": "everywhere"})
    with pytest.raises(WeMaskError, match="rank=0 is not valid"):
        configs_from_options({"gated_attention": True, "gated_attention_rank": 0})
    with pytest.raises(WeMaskError, match="layers='3:1'"):
        GatedNorm(layers="3:1")
    with pytest.raises(WeMaskError, match="outside the model"):
        install_all(make_tiny_model("llama"), [PreAffine(layers="2:9")])
    with pytest.raises(WeMaskError, match="one intervention per kind"):
        install_all(make_tiny_model("llama"), [GatedNorm(), GatedNorm(norms="ffn")])
    assert WeMask(WeMaskConfig(mask_rate=0.3, me_layer=1)).describe().startswith("WeMask r=0.3")


def test_installing_twice_is_refused_and_deep_copies_keep_working_copies():
    model = make_tiny_model("llama")
    installation = install_all(model, REMEDIES)
    with pytest.raises(WeMaskError, match="already installed"):
        install_all(model, [GatedNorm(norms="both", rank=4)])
    perturb(installation)
    changed = logits(model)
    twin = copy.deepcopy(model)
    installation.remove()
    assert torch.equal(logits(twin), changed)  # the copy carries its own modules and hooks


def test_the_package_imports_without_torch():
    code = "import sys, wemask_cli.interventions as i; i.flag_specs(); i.configs_from_options({'gated_norm': 'both'}); " \
        "print(sorted(m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "span, layers",
    [("1:3", [1, 2]), ("2:", [2, 3]), (":2", [0, 1]), ("0:4", [0, 1, 2, 3])],
)
def test_wemask_and_remedies_read_one_layer_range_grammar(span, layers):
    """--layers and --gated-norm-layers name the same layers for every form (once, WeMask refused 'a:' and ':b')."""
    model = make_tiny_model("llama")  # 4 layers
    installation = install_all(model, [WeMaskConfig(mask_rate=0.3, layers=span), GatedNorm(norms="attn", rank=2, layers=span)])
    assert masked_layers(model) == layers
    assert sorted(installation.items[1].modules) == [f"{l}.attn" for l in layers]


@pytest.mark.parametrize(
    "span, problem",
    [
        ("1", "is not valid"), ("a:b", "is not valid"), (":", "is not valid"),
        ("3:1", "is an empty or negative range"), ("-1:", "is an empty or negative range"),
        ("2:9", "is outside the model: it has 4 layers, use 0..3"), ("4:", "is outside the model"),
    ],
)
def test_wemask_and_remedies_refuse_a_layer_range_with_the_same_words(span, problem):
    errors = []
    for config in (WeMaskConfig(mask_rate=0.3, layers="all"), GatedNorm(rank=2)):
        with pytest.raises(WeMaskError) as err:
            install_all(make_tiny_model("llama"), [dataclasses.replace(config, layers=span)])
        errors.append(str(err.value))
    assert f"layers={span!r} {problem}" in errors[0]
    assert errors[1] == f"gated_norm {errors[0]}".replace("from-me, me-only, all", "all")


def test_wemask_declares_its_flags_as_the_remedies_do_and_every_command_shows_them_as_declared():
    """WeMask's flags are its own declaration (interventions/wemask.py FLAGS, `everywhere`), found through the registry
    by that declaration; the commands build their options from it, and MaskRequest parses the same names."""
    import typer

    from wemask_cli.cli import app
    from wemask_cli.interventions.registry import everywhere_flags
    from wemask_cli.interventions.wemask import FLAGS, WeMask
    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.method.config import KIND

    assert WeMask.kind == KIND and WeMask.everywhere and list(everywhere_flags().values()) == list(FLAGS)
    assert not {spec.dest for spec in flag_specs()} & set(everywhere_flags())  # the trainers' remedy panel has none of them
    root = typer.main.get_command(app)
    for name in ("infer", "eval", "sft", "dpo", "grpo", "kto"):
        command = root.built_command(name)
        shown = {opt: param for param in command.params for opt in param.opts}
        for spec in FLAGS:
            assert spec.name in shown and set(spec.short) <= set(shown[spec.name].opts), (name, spec.name)
            if spec.dest != "mask_rate":  # each command says what --mask-rate does there (a sweep, or one rate trained)
                assert shown[spec.name].help == spec.help, (name, spec.name)
    request = MaskRequest.from_options({"mask_rate": "0,0.3", "me_layer": "2", "select": "random", "tokens": "first", "strength": 0.5})
    assert request == MaskRequest.parse("0,0.3", 2, "random", None, 0.5, "first")


def test_the_wemask_hooks_carry_the_kind_the_intervention_declares():
    from wemask_cli.interventions.wemask import WeMask
    from wemask_cli.method.owned_hooks import owned_hooks

    model = make_tiny_model("llama")
    with install_all(model, [WeMaskConfig(mask_rate=0.5, me_layer=1)]) as installation:
        assert installation.wemask is not None and {record.kind for record in installation.items[0].records} == {WeMask.kind}
        assert owned_hooks(model, WeMask.kind)
