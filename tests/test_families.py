"""Decoder families beyond the dense pre-norm ones (issue 27): MoE, post-norm OLMo-2, parallel Cohere 2, Granite.

The shared spec's properties (SPEC section 3) run on every family through the `family` fixture in test_mask.py;
here: what each layout selects and refuses, locate on MoE models (a massive activation planted in an expert),
the commands on saved tiny models, and one training step per stage on an MoE model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import FAMILY_CONFIGS, MOE_FAMILIES, make_tiny_model, run_main

from wemask_cli import WeMaskError
from wemask_cli.interventions import install_all, load_saved
from wemask_cli.interventions.gated_norm import GatedNorm
from wemask_cli.method import locate as method
from wemask_cli.method.arch import ARCHITECTURES, resolve_layers, supported_families
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.method.metrics import Tokens, concentration, first_minus_rest
from wemask_cli.method.moe import expert_projections
from wemask_cli.method.wemask_hook import apply_wemask

IDS = torch.tensor([[5, 17, 42, 9, 33, 71, 8]])
DIM, OUT, FIRST = 7, 40, 3  # planted: the first token's embedding dim, the dim the expert writes, its token id


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory, tiny_tokenizer):
    """Each family's tiny model saved with the test tokenizer (what `wemask ... --model DIR` loads)."""
    dirs = {}
    for name in FAMILY_CONFIGS:
        path = tmp_path_factory.mktemp(name)
        model = make_tiny_model(name, vocab_size=len(tiny_tokenizer))
        model.config.pad_token_id = model.config.eos_token_id = tiny_tokenizer.eos_token_id
        model.save_pretrained(path)
        tiny_tokenizer.save_pretrained(path)
        dirs[name] = str(path)
    return dirs


# ---------------------------------------------------------------- the adapter's rules per layout


def test_every_family_is_in_the_adapter_and_in_its_messages():
    assert set(FAMILY_CONFIGS) <= set(ARCHITECTURES)
    listed = supported_families()
    assert "olmo2 (post-norm)" in listed and "cohere2 (parallel)" in listed and "mixtral (pre-norm)" in listed


def test_olmo2_selects_by_the_previous_layers_post_ffn_norm_and_refuses_layer_0():
    model = make_tiny_model("olmo2")
    parts = resolve_layers(model)
    with torch.no_grad():
        for part in parts:
            part.layer.post_feedforward_layernorm.weight.copy_(torch.randn(64))
    handle = apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=1))
    for l in (1, 2, 3):
        expected = torch.topk(parts[l - 1].layer.post_feedforward_layernorm.weight.abs(), 16).indices.sort().values
        assert handle.config.dims[l] == expected.tolist()
    handle.remove()
    with pytest.raises(WeMaskError) as refused:
        apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=0))
    assert str(refused.value) == (
        "model_type='olmo2' (post-norm): layer 0 has no norm whose weight selects WeMask's dims (the previous "
        "layer's post_feedforward_layernorm), which WeMask's --select weight needs: mask from --me-layer 1 or later, "
        "or choose dims with --select random or activation"
    )
    assert apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=0, select="random")).hooked_layers == [0, 1, 2, 3]


def test_olmo2_remedies_refuse_only_the_norm_it_lacks():
    model = make_tiny_model("olmo2")
    with pytest.raises(WeMaskError, match=r"layer 0 has no norm before the attention, which gated_norm on the attn "
                                          r"norm needs \(the post-norm layout has none\)"):  # fmt: skip
        install_all(model, [GatedNorm(norms="attn")])


def test_cohere2_selects_by_its_one_norm_and_gates_it_once():
    model = make_tiny_model("cohere2")
    parts = resolve_layers(model)
    assert all(p.attn_norm is p.ffn_norm is p.layer.input_layernorm for p in parts)
    with torch.no_grad():
        parts[1].layer.input_layernorm.weight.copy_(torch.linspace(0.1, 3, 64))
    handle = apply_wemask(model, WeMaskConfig(mask_rate=0.25, me_layer=1))
    assert handle.config.dims[1] == list(range(48, 64))
    handle.remove()
    plain = logits(model)
    installed = install_all(model, [GatedNorm(norms="both", rank=4)])
    assert len(installed.items[0].records) == 4  # one gate per layer, not two on the same norm
    assert torch.equal(logits(model), plain)


def test_gpt_oss_mixes_packed_sequences_without_wemask():
    """Why test_mask's packed check skips gpt_oss: transformers' own model ignores packed position ids there. When
    this fails, transformers fixed it: drop gpt_oss from test_mask.UNPACKED."""
    model = make_tiny_model("gpt_oss")
    other = torch.tensor([[11, 12, 99, 4]])
    packed = torch.cat([IDS, other], 1)
    positions = torch.cat([torch.arange(7), torch.arange(4)])[None]
    with torch.no_grad():
        out = model(input_ids=packed, position_ids=positions, use_cache=False).logits[0, 7:]
    assert not torch.allclose(out, logits(model, other)[0], atol=1e-4)


# ---------------------------------------------------------------- locate on MoE models


def test_moe_delta_c_uses_the_first_tokens_experts_and_the_shared_expert():
    model = make_tiny_model("qwen2_moe")
    part = resolve_layers(model)[2]
    captured = {}
    part.experts.register_forward_hook(
        lambda _m, args, _out: captured.update(h=args[0].detach().clone(), index=args[1].detach().clone())
    )
    result = method.locate(model, [IDS[0].tolist()], batch_size=1)
    h, chosen = captured["h"], captured["index"][0]
    with torch.no_grad():
        pieces = [expert_projections(part.experts, int(e), h)["down"] for e in chosen] + [part.shared_experts(h)]
    values = concentration(torch.cat(pieces, -1))[None]
    expected = first_minus_rest(values, Tokens.from_mask(torch.ones(1, 7)))
    assert result.layers[2]["delta_c_down"] == pytest.approx(float(expected), rel=1e-5)
    assert result.stats.first_experts[2][0].tolist() == chosen.tolist()


def plant(model, layer: int, expert: int | None, scale: float = 1.0, first: int = FIRST) -> None:
    """Make `expert` (None: the shared expert) of `layer` write a massive value for token `first` only: its
    embedding alone has dim DIM, the router sends DIM to `expert`, and the expert reads DIM and writes dim OUT."""
    part = resolve_layers(model)[layer]
    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        embed[:, DIM] = 0
        embed[first] = 0
        embed[first, DIM] = 1
        if expert is None:
            shared = part.shared_experts
            for linear in (shared.gate_proj, shared.up_proj):
                linear.weight.zero_()
                linear.weight[:, DIM] = scale
            shared.down_proj.weight.zero_()
            shared.down_proj.weight[OUT] = scale
            return
        router = getattr(part.ffn, "router", None) or part.ffn.gate
        router.weight[expert, DIM] = 10.0
        experts = part.experts
        transposed = getattr(experts, "is_transposed", False)
        gate_up, down = experts.gate_up_proj[expert], experts.down_proj[expert]
        gate_up, down = (gate_up.T, down.T) if transposed else (gate_up, down)  # (2I, d), (d, I)
        gate_up.zero_()
        gate_up[:, DIM] = scale
        down.zero_()
        down[OUT] = scale
        for name in ("gate_up_proj_bias", "down_proj_bias"):
            if getattr(experts, "has_bias", False):
                getattr(experts, name)[expert].zero_()


PROMPTS = [[FIRST, 17, 42, 9, 33, 71, 8], [FIRST, 11, 12, 99, 4], [FIRST, 60, 61, 62, 63, 64, 65, 66], [FIRST, 20, 21]]


@pytest.mark.parametrize("family, expert", [*((f, 2) for f in MOE_FAMILIES), ("qwen2_moe", None), ("deepseek_v3", None)])
def test_locate_finds_a_massive_activation_planted_in_an_expert(family, expert):
    model = make_tiny_model(family)
    plant(model, 1, expert, scale=0.6 if family == "gpt_oss" else 1.0)  # gpt-oss clamps its GLU at 7
    result = method.locate(model, PROMPTS, batch_size=2)
    detection = result.detection
    assert detection.me_layer == 1 and detection.agree == 4
    assert detection.writer["branch"] == ("routed experts" if expert is not None else "shared expert"), detection.writer
    routing = result.layers[1]["first_token_routing"]
    assert routing["prompts"] == 4 and routing["modal_set_share"] == 1.0  # the same first token: the same experts
    if expert is not None:
        assert {"expert": expert, "share": 1.0} in routing["experts"] and expert in routing["modal_set"]
    assert result.layers[1]["routed_share" if expert is not None else "shared_share"] > 0.9


def test_locate_cli_reports_routing_and_writer_in_json_and_plot(monkeypatch, capsys, tmp_path, tiny_tokenizer):
    first = tiny_tokenizer.encode("The")
    assert len(first) == 1
    lines = ["The quick brown fox jumps over the lazy dog.", "The answer is 42.", "The clips were sold in May.",
             "The sum of a and b."]  # fmt: skip
    assert all(tiny_tokenizer.encode(line)[0] == first[0] and tiny_tokenizer.encode(line)[1:].count(first[0]) == 0
               for line in lines)  # fmt: skip
    model = make_tiny_model("qwen2_moe", vocab_size=len(tiny_tokenizer))
    plant(model, 1, 3, first=first[0])
    model.config.pad_token_id = model.config.eos_token_id = tiny_tokenizer.eos_token_id
    model.save_pretrained(tmp_path / "m")
    tiny_tokenizer.save_pretrained(tmp_path / "m")
    (tmp_path / "p.txt").write_text("\n".join(lines) + "\n")
    code, out, err = run_main(monkeypatch, capsys, "locate", "--model", str(tmp_path / "m"), "--prompts",
                              str(tmp_path / "p.txt"), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["me_layer"] == 1 and report["jump"]["writer"]["branch"] == "routed experts"
    assert [r["layer"] for r in report["routing"]] == [0, 1, 2, 3]
    assert {"expert": 3, "share": 1.0} in report["routing"][1]["experts"]
    assert "written by the routed experts" in report["verdict"] and "to expert(s) " in report["verdict"]
    assert "First-token routing" in out and (tmp_path / "r.png").stat().st_size > 10_000


# ---------------------------------------------------------------- the commands on every family


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_infer_runs_on_every_family(monkeypatch, capsys, family_dirs, family):
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", family_dirs[family], "--prompt", "Hello there",
                              "--mask-rate", "0.3", "--me-layer", "1", "--max-new-tokens", "4")  # fmt: skip
    assert code == 0 and "Traceback" not in err, err


def test_locate_refuses_nothing_on_post_norm_and_reports_what_it_cannot_measure(monkeypatch, capsys, family_dirs, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "locate", "--model", family_dirs["olmo2"], "--json", str(tmp_path / "o.json"))
    assert code == 0, err
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["routing"] is None and all(r["delta_frac"] is None and r["delta_kl"] is None for r in report["layers"])
    assert all(r["delta_c_down"] is not None for r in report["layers"])


@pytest.mark.parametrize("family", ["gpt_oss", "olmo2"])
def test_eval_runs_with_the_mask(monkeypatch, capsys, tmp_path, family_dirs, family):
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", family_dirs[family], "--task", "perplexity", "--limit",
                            "2", "--mask-rate", "0,0.3", "--me-layer", "1", "--output", str(tmp_path / "e"))  # fmt: skip
    assert code == 0, err


# ---------------------------------------------------------------- one training step per stage on MoE models

DATA = Path(__file__).resolve().parents[1] / "data"
STEP = ["--per-device-train-batch-size", "2", "--logging-steps", "1", "--max-steps", "1", "--learning-rate", "1e-3",
        "--seed", "0", "--report-to", "none", "--save-strategy", "no", "--mask-rate", "0.3", "--me-layer", "1"]  # fmt: skip
STAGES = [
    ("sft", "qwen2_moe", ["--dataset", str(DATA / "sft_chat.jsonl"), "--max-length", "64", "--mode", "aware",
                          "--gated-norm", "both", "--gated-norm-rank", "4"]),
    ("dpo", "deepseek_v3", ["--dataset", str(DATA / "preferences.jsonl"), "--max-length", "64", "--mode", "free",
                            "--use-peft", "--lora-r", "4", "--pre-affine", "ffn"]),
    ("grpo", "gpt_oss", ["--dataset", str(DATA / "math_problems.jsonl"), "--mode", "aware", "--use-peft", "--lora-r",
                         "4", "--reward", "math", "--num-generations", "2", "--max-completion-length", "4"]),
    ("sft", "mixtral", ["--dataset", str(DATA / "sft_chat.jsonl"), "--max-length", "64", "--mode", "free",
                        "--use-peft", "--lora-r", "4"]),
]  # fmt: skip


@pytest.mark.parametrize("stage, family, flags", STAGES, ids=[f"{s}-{f}" for s, f, _ in STAGES])
def test_one_training_step_per_stage_on_moe_models(monkeypatch, capsys, tmp_path, family_dirs, stage, family, flags):
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, stage, "--model", family_dirs[family], "-o", str(out), *STEP, *flags)
    assert code == 0, err
    saved = load_saved(out)
    mode = flags[flags.index("--mode") + 1]
    assert saved.wemask.mode == mode and sorted(saved.wemask.dims) == [1, 2, 3]
    remedies = [c.kind for c in saved.remedies]
    assert remedies == [kind for flag, kind in (("--gated-norm", "gated_norm"), ("--pre-affine", "pre_affine")) if flag in flags]
    assert json.loads((out / "metrics.json").read_text())["global_step"] == 1


@pytest.mark.parametrize("family", ["olmo2", "cohere2", "qwen2_moe"])
def test_gated_attention_and_ffn_remedies_start_as_the_identity(family):
    from wemask_cli.interventions.gated_attention import GatedAttention
    from wemask_cli.interventions.pre_affine import PreAffine

    model = make_tiny_model(family)
    plain = logits(model)
    remedies = [GatedAttention(rank=4), PreAffine(norms="both" if family != "olmo2" else "ffn")]
    if family == "olmo2":  # no pre-FFN norm either: gated attention alone
        remedies = remedies[:1]
    installed = install_all(model, remedies)
    assert torch.equal(logits(model), plain) and list(installed.parameters())
