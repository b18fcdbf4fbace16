"""`wemask locate` (SPEC section 2): metrics against hand-computed values, streaming statistics, detection,
the embedded model's ME layer, the command line and the `--me-layer auto` cache."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, run_main

from wemask_cli.method import locate as method
from wemask_cli.method.arch import resolve_layers
from wemask_cli.method.diversity import NAMES as DIVERSITY
from wemask_cli.method.locate import (
    PromptStats,
    Tokens,
    concentration,
    detect,
    detect_prompt,
    first_minus_rest,
    first_over_rest,
    frac_in_dims,
    kl_to_scale,
    largest_activation,
    mean_pairwise_cosine,
    rest_mean,
    sink_hits,
    sink_mass,
)
from wemask_cli.models.loading import LoadedModel

EMBEDDED_ME = 11
DATA = Path(__file__).resolve().parents[1] / "data"
LEFT = Tokens.from_mask(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0], [0, 0, 0, 1]]))


# ---------------------------------------------------------------- metrics vs hand-computed values


def test_first_and_rest_follow_the_attention_mask():
    assert LEFT.first.tolist() == [2, 0, 3]
    assert LEFT.rest.tolist() == [[False, False, False, True], [False, True, True, False], [False] * 4]
    values = torch.tensor([[9.0, 9.0, 4.0, 2.0], [5.0, 1.0, 3.0, 9.0], [7.0, 7.0, 7.0, 6.0]])
    assert rest_mean(values, LEFT)[:2].tolist() == [2.0, 2.0]
    assert math.isnan(rest_mean(values, LEFT)[2])  # a 1-token prompt has no other tokens
    assert first_over_rest(values, LEFT)[:2].tolist() == [2.0, 2.5]
    assert first_minus_rest(values, LEFT)[:2].tolist() == [2.0, 3.0]


def test_frac_kl_and_concentration_by_hand():
    assert frac_in_dims(torch.tensor([3.0, 4.0, 0.0]), torch.tensor([1])).item() == pytest.approx(16 / 25)
    ones = torch.ones(2)
    assert kl_to_scale(torch.tensor([1.0, 1.0]), ones).item() == pytest.approx(0.0, abs=1e-7)
    assert kl_to_scale(torch.tensor([1.0, 0.0]), ones).item() == pytest.approx(math.log(2))
    assert kl_to_scale(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)
    assert kl_to_scale(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])).item() == pytest.approx(-math.log(1e-12), rel=1e-5)
    assert concentration(torch.tensor([5.0, 0.0, 0.0, 0.0])).item() == pytest.approx(1.0)
    assert concentration(torch.tensor([1.0, -1.0, 1.0, 1.0])).item() == pytest.approx(0.25)
    assert concentration(torch.tensor([3.0, 4.0])).item() == pytest.approx((9 / 25) ** 2 + (16 / 25) ** 2)


def test_sink_mass_cosine_largest_activation_and_sink_hits_by_hand():
    weights = torch.zeros(2, 2, 4, 4)
    weights[0, 0, 3, 2], weights[0, 1, 3, 2] = 0.6, 0.2  # row 0: first real token at 2, one query after it
    weights[1, 0, 1, 0], weights[1, 0, 2, 0], weights[1, 1, 1, 0], weights[1, 1, 2, 0] = 0.5, 0.2, 0.3, 0.4
    got = sink_mass(weights, Tokens(LEFT.real[:2], LEFT.first[:2]))
    assert got.tolist() == pytest.approx([0.4, (0.5 + 0.2 + 0.3 + 0.4) / 4])

    unit = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert mean_pairwise_cosine(unit.sum(0), 3).item() == pytest.approx(1 / 3)  # pairs: 0, 1, 0
    assert math.isnan(mean_pairwise_cosine(unit[0], 1).item())

    h = torch.zeros(1, 3, 2)
    h[0, 0, 1] = -50.0  # a pad: ignored
    h[0, 2, 0] = -7.0
    value, token, dim = largest_activation(h, Tokens.from_mask(torch.tensor([[0, 1, 1]])))
    assert (value.item(), token.item(), dim.item()) == (7.0, 1, 0)

    h = torch.ones(1, 3, 50)
    h[0, :2, 7] = 30.0  # 30 / rms(30, 1 x 49) = 6.9 >= 6 on two tokens
    count, scale = sink_hits(h, torch.tensor([[True, True, True]]))
    assert count[7].item() == 2 and count.sum().item() == 2
    assert scale[7].item() == pytest.approx(2 * 30 / math.sqrt(949 / 50) + 1)


# ---------------------------------------------------------------- detection rule on synthetic norms


def norms(*values):
    return torch.tensor(values, dtype=torch.float64)


JUMPING = norms(1, 1.2, 1.5, 30, 31, 30, 29)
OTHERS = norms(1, 1, 1, 1.1, 1.2, 1.3, 1.4)
SHARE = norms(0.5, 0.5, 0.5, 0.97, 0.0, 0.0, 0.0)


def test_detect_prompt_follows_the_decision():
    assert detect_prompt(JUMPING, OTHERS, SHARE, 1.0, False) == 3
    assert detect_prompt(JUMPING, OTHERS, norms(*[0.1] * 7), 1.0, False) is None  # not written by the FFN
    assert detect_prompt(norms(1, 1.2, 1.5, 30, 1.6, 1.7, 1.8), OTHERS, SHARE, 1.0, False) is None  # does not persist
    assert detect_prompt(norms(1, 1.2, 1.5, 6, 31, 30, 29), OTHERS, SHARE, 1.0, False) is None  # 20x, but over 2 layers
    repeated_others = JUMPING * 0.98  # one token repeated: every token is massive
    assert detect_prompt(JUMPING, repeated_others, SHARE, 1.0, False) is None
    assert detect_prompt(JUMPING, repeated_others, SHARE, 1.0, True) == 3  # degenerate: the absolute step decides
    late = norms(1, 1, 1, 1, 1, 1, 40)
    assert detect_prompt(late, OTHERS, norms(*[1.0] * 7), 1.0, False) is None  # nothing after it to persist
    assert detect_prompt(norms(40, 41, 40, 40), norms(1, 1, 1, 1), norms(*[1.0] * 4), 1.0, True) is None  # layer 0


def stats_of(rows, degenerate=None):
    stats = PromptStats.empty(len(rows), len(JUMPING), 4)
    stats.values["first_norm"][:] = torch.stack([r[0] for r in rows])
    stats.values["other_norm"][:] = OTHERS
    stats.values["ffn_share"][:] = torch.stack([r[1] if len(r) > 1 else SHARE for r in rows])
    stats.input_first_norm[:] = 1.0
    stats.lengths = torch.full((len(rows),), 5)
    stats.degenerate = torch.tensor(degenerate or [False] * len(rows))
    return stats


def test_detect_needs_a_majority_and_reports_earlier_rises():
    flat = norms(1, 1, 1, 1, 1, 1, 1)
    later = norms(1, 1.2, 1.5, 1.5, 1.6, 40, 40)
    found = detect(stats_of([(JUMPING,), (JUMPING,), (flat,)]))
    assert (found.me_layer, found.agree, found.total, found.per_prompt) == (3, 2, 3, [3, 3, None])
    assert found.confidence == pytest.approx(2 / 3) and found.step == pytest.approx(20) and found.ffn_share == 0.97
    split = detect(stats_of([(JUMPING,), (later, norms(0, 0, 0, 0, 0, 0.9, 0)), (flat,)]))
    assert split.me_layer is None and split.per_prompt == [3, 5, None] and split.confidence == 0.0
    rising = norms(1, 2.5, 6, 100, 100, 100, 100)  # x2.5 at layer 1 (2.5x the others), x2.4 at 2, then the jump
    others = norms(1, 1, 1, 1, 1, 1, 1)
    stats = stats_of([(rising,)] * 2)
    stats.values["other_norm"][:] = others
    found = detect(stats)
    assert found.me_layer == 3
    assert [r["layer"] for r in found.earlier_rises] == [1, 2]


# ---------------------------------------------------------------- streaming statistics on tiny models

PROMPTS = [[5, 17, 42, 9, 33], [11, 12, 99, 4, 8, 61, 70, 3, 2], [77], [40, 40, 40, 40], [7, 8, 9]]


def test_batched_equals_one_by_one_and_tiny_models_have_no_me_layer(arch):
    model = make_tiny_model(arch)
    implementation = model.config._attn_implementation
    alone = method.collect_stats(model, PROMPTS, batch_size=1)
    right = method.collect_stats(model, PROMPTS, batch_size=5, padding_side="right")
    left = method.collect_stats(model, PROMPTS, batch_size=4, padding_side="left")
    for batched in (right, left):
        for name, values in alone.values.items():
            rows = [0, 1, 4] if name in ("max_token", "max_dim") else slice(None)  # a repeated token ties exactly
            torch.testing.assert_close(batched.values[name][rows], values[rows], rtol=1e-4, atol=1e-5, equal_nan=True, msg=name)
        torch.testing.assert_close(batched.input_first_norm, alone.input_first_norm, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(batched.unit_sum, alone.unit_sum, rtol=1e-4, atol=1e-5)
        assert torch.equal(batched.sink_count, alone.sink_count) and batched.other_tokens == alone.other_tokens == 17
    assert alone.degenerate.tolist() == [False, False, True, True, False]
    assert not torch.isnan(alone.values["sink_mass"][0]).any(), "attention weights were not captured"
    assert torch.isnan(alone.values["other_norm"][2]).all()  # the 1-token prompt

    result = method.locate(model, PROMPTS)
    assert result.detection.me_layer is None and result.detection.per_prompt == [None] * 5
    assert len(result.layers) == 4 and result.layers[0]["layer"] == 0
    assert model.config._attn_implementation == implementation  # restored after measuring
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()), "hooks left behind"


ACT = {"silu": torch.nn.functional.silu, "gelu_pytorch_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}


def by_hand(model, ids: list[int]) -> dict[str, torch.Tensor]:
    """Per layer, from the residual entering the pre-FFN norm, by plain tensor math: the pre-FFN RMSNorm (1 + w for
    Gemma), the MLP with act(gate), Gemma's post-FFN norm, and the FFN metrics of SPEC section 2."""
    parts, seen = resolve_layers(model), {}
    handles = []
    for p in parts:
        handles.append(p.ffn_norm.register_forward_hook(lambda _m, i, _o, l=p.index: seen.__setitem__(("in", l), i[0][0])))
        handles.append(p.layer.register_forward_hook(lambda _m, _i, o, l=p.index: seen.__setitem__(("out", l), o)))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for handle in handles:
        handle.remove()
    config = model.config
    act, eps = ACT[getattr(config, "hidden_activation", None) or config.hidden_act], config.rms_norm_eps
    gemma = "gemma" in config.model_type

    def rms_norm(x, norm):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (norm.weight + (1.0 if gemma else 0.0))

    def ipr(v):
        share = v.pow(2) / v.pow(2).sum(-1, keepdim=True)
        return share.pow(2).sum(-1)

    names = ("norm_magnification", "ffn_magnification", "ffn_share", "delta_c_up", "delta_c_gate", "delta_c_down")
    metrics = {name: [] for name in names}
    with torch.no_grad():
        for p in parts:
            residual, out, mlp = seen["in", p.index], seen["out", p.index], p.ffn
            out = (out[0] if isinstance(out, tuple) else out)[0]
            h = rms_norm(residual, p.ffn_norm)
            if hasattr(mlp, "gate_up_proj"):
                gate, up = (h @ mlp.gate_up_proj.weight.T).chunk(2, dim=-1)
            else:
                gate, up = h @ mlp.gate_proj.weight.T, h @ mlp.up_proj.weight.T
            gate = act(gate)
            z = (gate * up) @ mlp.down_proj.weight.T
            branch = rms_norm(z, p.post_ffn_norm) if gemma else z
            torch.testing.assert_close(residual + branch, out)  # the branch is all the FFN adds to the residual
            norm_h, norm_branch = h.norm(dim=-1), branch.norm(dim=-1)
            metrics["norm_magnification"].append(norm_h[0] / norm_h[1:].mean())
            magnification = norm_branch / norm_h
            metrics["ffn_magnification"].append(magnification[0] / magnification[1:].mean())
            metrics["ffn_share"].append(norm_branch[0] / out[0].norm())
            for role, v in (("up", up), ("gate", gate), ("down", z)):
                c = ipr(v)
                metrics[f"delta_c_{role}"].append(c[0] - c[1:].mean())
    return {name: torch.stack(values).double() for name, values in metrics.items()}


@pytest.mark.parametrize("kind", ["llama", "gemma2", "phi3"])
def test_ffn_metrics_match_hand_computation(kind):
    """norm/FFN magnification, ffn_share (Gemma: after the post-FFN norm) and ΔC after up, act(gate) and down."""
    model = make_tiny_model(kind)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in resolve_layers(model):
            for norm in filter(None, (p.ffn_norm, p.post_ffn_norm)):
                norm.weight.add_(0.3 * torch.randn_like(norm.weight))  # so that w (or Gemma's 1 + w) matters
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[4]]
    stats = method.collect_stats(model, prompts, batch_size=3, padding_side="left")
    for row, ids in enumerate(prompts):
        for name, expected in by_hand(model, ids).items():
            got = stats.values[name][row]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=f"{kind} {name} prompt {row}")


def test_phi3_fused_gate_up_is_split():
    model = make_tiny_model("phi3")
    stats = method.collect_stats(model, PROMPTS[:2])
    for role in ("up", "gate", "down"):
        assert not torch.isnan(stats.values[f"delta_c_{role}"]).any(), role


# ---------------------------------------------------------------- the embedded SmolLM2-135M-Instruct


@pytest.mark.embedded
def test_embedded_model_has_one_me_layer_written_by_the_ffn(embedded):
    from wemask_cli.commands.locate_report import run_locate
    from wemask_cli.prompts.sets import load_prompts

    report = run_locate(embedded, load_prompts(None, None, "text", None))
    assert report["me_layer"] == EMBEDDED_ME and report["agreement"] == "16/16" and report["confidence"] == 1.0
    assert all(p["me_layer"] == EMBEDDED_ME for p in report["prompts"])
    jump = report["jump"]
    assert jump["step"] > 100 and jump["first_over_other"] > 100 and jump["ffn_share"] > 0.95
    assert [r["layer"] for r in report["earlier_rises"]] == [1, 2]
    assert 507 in [s["dim"] for s in report["residual_sink_dims"] if s["layers"] >= 15]
    record = report["layers"][EMBEDDED_ME]
    assert record["delta_kl"] < 0 and record["ffn_magnification"] > 100 and record["first_token_cosine"] > 0.99
    massive = report["massive_tokens"]  # on SmolLM2 only the first token is massive: --tokens massive = first
    assert massive["from_layer"] == EMBEDDED_ME and len(massive["prompts"]) == 16 and massive["beyond_first"] == 0
    assert massive["first_massive"] == 16 and "sit only on the first token in 16/16 prompts" in report["verdict"]

    # Independently of the recorder: at the ME layer the FFN branch writes the jump.
    parts = resolve_layers(embedded.model)[EMBEDDED_ME]
    seen = {}
    handles = [
        parts.ffn_norm.register_forward_hook(lambda _m, i, _o: seen.__setitem__("before_ffn", i[0][0, 0])),
        parts.ffn.register_forward_hook(lambda _m, _i, o: seen.__setitem__("ffn", o[0, 0])),
        parts.layer.register_forward_hook(lambda _m, _i, o: seen.__setitem__("out", (o[0] if isinstance(o, tuple) else o)[0, 0])),
    ]
    try:
        with torch.no_grad():
            embedded.model(**embedded.tokenizer("The cat sat on the mat.", return_tensors="pt"))
    finally:
        for handle in handles:
            handle.remove()
    out, before = seen["out"].norm(), seen["before_ffn"].norm()
    assert out > 50 * before, "the first token is not massive after the ME layer's FFN"
    torch.testing.assert_close(seen["before_ffn"] + seen["ffn"], seen["out"])


@pytest.mark.embedded
def test_embedded_degenerate_prompts_do_not_break_detection(embedded):
    tokenizer = embedded.tokenizer
    ids = [tokenizer("Paris is the capital of France.")["input_ids"], tokenizer("hello")["input_ids"], [504] * 6]
    result = method.locate(embedded.model, ids)
    assert result.stats.degenerate.tolist() == [False, True, True]
    assert result.detection.me_layer == EMBEDDED_ME and result.detection.agree == 3


# ---------------------------------------------------------------- the command line


REPORT_KEYS = {"model", "model_type", "num_layers", "layer_indexing", "me_layer", "confidence", "agreement", "jump",
               "me_layer_metrics", "earlier_rises", "metric_peaks", "residual_sink_dims", "verdict", "settings",
               "prompts", "layers", "diversity", "mask_rates", "massive_tokens", "interventions", "routing"}  # fmt: skip
LAYER_KEYS = {"layer", "first_norm", "other_norm", "first_over_other", "step", "max_abs", "max_abs_prompt", "max_abs_token",
              "max_abs_dim", "norm_magnification", "delta_frac", "delta_kl", "delta_c_up", "delta_c_gate", "delta_c_down",
              "ffn_magnification", "ffn_share", "first_token_cosine", "sink_mass", "ffn_norm_weight_mean_abs",
              "residual_sinks", "attn_share", "routed_share", "shared_share"}  # fmt: skip


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1870, 1430)  # 17 x 13 inches at 110 dpi: legends beside the panels


def test_cli_on_a_tiny_model_reports_no_me_layer(monkeypatch, capsys, tmp_path, tiny_model_dir):
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"text": "The quick brown fox."}, {"messages": [{"role": "user", "content": "What is 12 plus 30?"}]}, {"text": "a"}]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out_json, out_png = tmp_path / "r.json", tmp_path / "p.png"
    code, out, err = run_main(
        monkeypatch, capsys, "locate", "--model", tiny_model_dir, "--prompts", str(prompts), "--json", str(out_json),
        "--plot", str(out_png), "--mask-rate", "0.3", "-r", "1",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out_json.read_text())
    assert set(report) == REPORT_KEYS and set(report["layers"][0]) == LAYER_KEYS
    assert report["me_layer"] is None and report["layer_indexing"] == "0-based" and report["mask_rates"] == []
    assert [r["layer"] for r in report["diversity"]] == [0, 1, 2, 3] and set(report["diversity"][0]) == {"layer", *DIVERSITY}
    assert report["diversity"][0]["cosine"] is not None and report["diversity"][0]["effective_rank_rest"] > 0
    assert [p["tokens"] > 0 for p in report["prompts"]] == [True] * 3
    assert "No ME layer found" in out and "0-based" in out and "--mask-rate was not measured" in err
    check_png(out_png)

    lines = tmp_path / "prompts.txt"
    lines.write_text("first prompt here\n\nsecond one\n")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"body": f"row {i} of the data"}) + "\n" for i in range(5)))
    for source in (["--prompts", str(lines)], ["--dataset", str(data), "--text-field", "body", "--num-prompts", "2"]):
        code, _, err = run_main(monkeypatch, capsys, "locate", "--model", tiny_model_dir, *source, "--json", str(out_json), "--overwrite")
        assert code == 0, err
    assert len(json.loads(out_json.read_text())["prompts"]) == 2


@pytest.fixture
def gpt2_dir(tmp_path, tiny_tokenizer):
    import transformers

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=len(tiny_tokenizer)))
    model.save_pretrained(tmp_path / "gpt2")
    tiny_tokenizer.save_pretrained(tmp_path / "gpt2")
    return str(tmp_path / "gpt2")


@pytest.mark.parametrize(
    "case, message",
    [
        ("empty", "is empty: give jsonl rows with 'messages', 'prompt' or 'text', or one prompt per line"),
        ("missing", "cannot read --prompts"),
        ("no-field", "has no 'messages', 'prompt' or 'text' (found ['body'])"),
        ("dataset-missing", "--dataset"),
        ("dataset-field", "has no column 'text'"),
        ("plot", "give a file name ending in .png"),
        ("rate", "--mask-rate 2 is out of range"),
        ("gpt2", "cannot find decoder layers"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(monkeypatch, capsys, tmp_path, tiny_model_dir, gpt2_dir, case, message):
    empty, bad, data = tmp_path / "empty.jsonl", tmp_path / "bad.jsonl", tmp_path / "d.jsonl"
    empty.write_text("\n")
    bad.write_text('{"body": "x"}\n')
    data.write_text('{"body": "x"}\n')
    args = {
        "empty": ["--prompts", str(empty)],
        "missing": ["--prompts", str(tmp_path / "nope.jsonl")],
        "no-field": ["--prompts", str(bad)],
        "dataset-missing": ["--dataset", str(tmp_path / "nope.jsonl")],
        "dataset-field": ["--dataset", str(data)],
        "plot": ["--plot", str(tmp_path / "p.jpg")],
        "rate": ["--mask-rate", "2"],
        "gpt2": ["--model", gpt2_dir, "--prompts", str(data.with_name("t.txt"))],
    }[case]
    data.with_name("t.txt").write_text("one prompt\n")
    model = [] if case == "gpt2" else ["--model", tiny_model_dir]
    code, _, err = run_main(monkeypatch, capsys, "locate", *model, *args)
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("wemask: error: ") and message in err, err
    assert "Traceback" not in err


@pytest.mark.embedded
def test_cli_on_the_embedded_model_with_mask_rates(monkeypatch, capsys, tmp_path, embedded_dir):
    out_json, out_png = tmp_path / "r.json", tmp_path / "p.png"
    code, out, err = run_main(
        monkeypatch, capsys, "locate", "--model", embedded_dir, "--num-prompts", "4", "--max-length", "64", "--mask-rate", "0.3",
        "--json", str(out_json), "--plot", str(out_png),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out_json.read_text())
    assert report["me_layer"] == EMBEDDED_ME and report["agreement"] == "4/4"
    assert f"Layer {EMBEDDED_ME} (0-based, of 30) is the ME layer" in " ".join(out.split())
    (run,) = report["mask_rates"]
    masked, plain = run["mean_sink_mass_after_me"], run["unmasked_mean_sink_mass_after_me"]
    assert 0 < masked < plain, "WeMask should weaken the attention sink without removing it"
    assert len(run["sink_mass"]) == 30
    for layer in (EMBEDDED_ME - 1, EMBEDDED_ME):  # the mask changes the measures from the ME layer on, not before
        changed = run["diversity"][layer]["effective_rank_rest"] != report["diversity"][layer]["effective_rank_rest"]
        assert changed == (layer >= EMBEDDED_ME), layer
    check_png(out_png)


# ---------------------------------------------------------------- --me-layer auto through the cache


@pytest.fixture
def count_locates(monkeypatch, tmp_path):
    from wemask_cli.mask_request import me_layer_cache as locate_cache

    monkeypatch.setattr(locate_cache, "cache_dir", lambda: tmp_path / "cache")
    calls = []
    real = method.locate
    monkeypatch.setattr(method, "locate", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_cache_is_keyed_by_weights(count_locates, tiny_tokenizer, tmp_path):
    from wemask_cli.mask_request.me_layer_cache import cached_me_layer

    loaded = LoadedModel(make_tiny_model("llama", vocab_size=len(tiny_tokenizer)), tiny_tokenizer, "tiny", None)
    assert cached_me_layer(loaded) is None and cached_me_layer(loaded) is None
    assert len(count_locates) == 1
    with torch.no_grad():
        resolve_layers(loaded.model)[2].ffn_norm.weight[0] += 0.5
    assert cached_me_layer(loaded) is None
    assert len(count_locates) == 2
    with torch.no_grad():  # not a norm: a retrained FFN
        resolve_layers(loaded.model)[1].ffn.down_proj.weight.mul_(1.01)
    assert cached_me_layer(loaded) is None
    assert len(count_locates) == 3

    # A model directory retrained in place, norms unchanged: its weight file changes, the model in memory does not.
    directory = tmp_path / "model"
    loaded.model.save_pretrained(directory)
    loaded = LoadedModel(loaded.model, tiny_tokenizer, str(directory), None)
    assert cached_me_layer(loaded) is None and cached_me_layer(loaded) is None
    assert len(count_locates) == 4
    retrained = make_tiny_model("llama", seed=1, vocab_size=len(tiny_tokenizer))
    retrained.load_state_dict({k: v for k, v in loaded.model.state_dict().items() if "norm" in k}, strict=False)
    retrained.save_pretrained(directory)
    assert cached_me_layer(loaded) is None
    assert len(count_locates) == 5


@pytest.mark.embedded
def test_infer_me_layer_auto_locates_once(count_locates, monkeypatch, capsys, embedded_dir):
    for _ in range(2):
        code, _, err = run_main(
            monkeypatch, capsys, "infer", "--model", embedded_dir, "-p", "Hi", "--mask-rate", "0.3", "--me-layer", "auto",
            "--max-new-tokens", "2",
        )  # fmt: skip
        assert code in (0, None), err
        assert f"ME layer (auto): {EMBEDDED_ME} (0-based)" in err
    assert len(count_locates) == 1


@pytest.mark.embedded
def test_trainer_me_layer_auto_saves_the_located_layer(count_locates, monkeypatch, capsys, tmp_path, embedded_dir):
    out = tmp_path / "sft"
    code, _, err = run_main(
        monkeypatch, capsys, "sft", "--model", embedded_dir, "-o", str(out), "--dataset", str(DATA / "sft_chat.jsonl"),
        "--use-peft", "--mask-rate", "0.3", "--me-layer", "auto", "--max-steps", "1", "--max-length", "32",
        "--per-device-train-batch-size", "1", "--save-strategy", "no", "--train-on-prompt",
    )  # fmt: skip
    assert code in (0, None), err
    assert f"ME layer (auto): {EMBEDDED_ME} (0-based)" in err and len(count_locates) == 1
    assert json.loads((out / "wemask_config.json").read_text())["me_layer"] == EMBEDDED_ME


def test_cli_checks_outputs_and_prompt_encoding_before_loading(monkeypatch, capsys, tmp_path):
    from wemask_cli.models import loading as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out_json, out_png, latin1 = tmp_path / "r.json", tmp_path / "p.png", tmp_path / "prompts.txt"
    out_json.write_text("keep")
    out_png.write_text("keep")
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    for args, message in (
        (["--json", str(out_json)], f"{out_json} exists: pass --overwrite to replace it, or choose another name"),
        (["--json", str(tmp_path / "new.json"), "--plot", str(out_png)], f"{out_png} exists: pass --overwrite"),
        (["--prompts", str(latin1)], f"--prompts {latin1} is not UTF-8 text"),
    ):
        code, _, err = run_main(monkeypatch, capsys, "locate", *args)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    assert out_json.read_text() == out_png.read_text() == "keep"


# ---------------------------------------------------------------- massive tokens (issue 12)


def test_massive_tokens_use_the_median_of_the_tokens_up_to_each(tiny_tokenizer):
    """The `--tokens massive` rule: over the median of the tokens seen, the first excluded (the first token itself
    against the median of all the others)."""
    from types import SimpleNamespace

    from wemask_cli.method.massive_tokens import massive_tokens, prefix_ratio

    norms = torch.tensor([[100.0, 1.0, 2.0, 3.0, 90.0], [100.0, 1.0, 2.0, 3.0, 4.0]])
    assert torch.allclose(prefix_ratio(norms)[0], torch.tensor([100 / 2, 1 / 1, 2 / 1, 3 / 2, 90 / 2]))
    ids = [[5, 6, 7, 8, 9]]
    summary = massive_tokens(SimpleNamespace(norms=[norms]), ids, tiny_tokenizer, from_layer=0)
    first, last = summary["prompts"][0]["tokens"]
    assert (first["position"], first["layers"], first["max_ratio"]) == (0, 2, 50.0)
    assert (last["position"], last["layers"], last["max_ratio"]) == (4, 1, 45.0)
    assert last["text"] == tiny_tokenizer.decode([9]) and summary["beyond_first"] == 1 and summary["first_massive"] == 1
    later = massive_tokens(SimpleNamespace(norms=[norms]), ids, tiny_tokenizer, from_layer=1)
    assert later["beyond_first"] == 0 and [t["position"] for t in later["prompts"][0]["tokens"]] == [0]


def test_norms_are_recorded_during_locates_own_pass(tiny_tokenizer):
    from wemask_cli.method.massive_tokens import recording

    model = make_tiny_model("llama", vocab_size=len(tiny_tokenizer))
    ids = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [5, 6, 7, 8, 9, 10]]
    with recording(model, ids) as recorder:
        method.locate(model, ids, batch_size=2, pad_id=tiny_tokenizer.pad_token_id)
    for prompt, norms in zip(ids, recorder.norms):
        with torch.no_grad():
            hidden = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
        expected = torch.stack([h[0].norm(dim=-1) for h in hidden[: len(model.model.layers)]])
        assert torch.allclose(norms, expected, rtol=1e-4), (norms, expected)
    assert not model.model._forward_pre_hooks and not model.model.layers[0]._forward_pre_hooks  # hooks removed


def test_locate_measures_a_model_with_the_interventions_it_carries(monkeypatch, capsys, tiny_model_dir, tmp_path):
    from wemask_cli.interventions import install_all, save_interventions
    from wemask_cli.interventions.gated_norm import GatedNorm
    from wemask_cli.models.loading import load_model

    plain = load_model(tiny_model_dir, dtype="float32")
    run_dir = tmp_path / "run"
    plain.model.save_pretrained(run_dir)
    plain.tokenizer.save_pretrained(run_dir)
    installation = install_all(plain.model, [GatedNorm(norms="ffn", rank=2)])
    with torch.no_grad():
        for parameter in installation.parameters():
            parameter.add_(0.5)
    save_interventions(run_dir, installation)
    reports = {}
    for name, model in (("plain", tiny_model_dir), ("remedied", str(run_dir))):
        code, _, err = run_main(monkeypatch, capsys, "locate", "--model", model, "--json", str(tmp_path / f"{name}.json"))
        assert code == 0, err
        reports[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert reports["plain"]["interventions"] == [] and reports["remedied"]["interventions"] == installation.describe()
    norms = {name: [r["first_norm"] for r in report["layers"]] for name, report in reports.items()}
    assert norms["plain"] != norms["remedied"]  # measured with the gates in place


CHAT = [{"role": "user", "content": "What is 12 plus 30?"}]


@pytest.mark.parametrize(
    "name, content, prompts",
    [
        ("p.jsonl", "".join(json.dumps(r) + "\n" for r in ({"text": "a"}, {"prompt": "b"}, {"messages": CHAT})), ["a", "b", CHAT]),
        ("p.json", json.dumps([{"prompt": "a"}, {"messages": CHAT, "text": "ignored"}]), ["a", CHAT]),
        ("p.txt", "first\n\n  \nsecond\u2028half\r\n", ["first", "second\u2028half"]),
    ],
)
def test_locate_and_infer_read_prompt_files_alike(tmp_path, name, content, prompts):
    """One reader (prompts.read_prompt_file): once, infer refused 'text' rows and .json lists, locate split lines at U+2028."""
    from wemask_cli.commands.infer import read_prompts
    from wemask_cli.prompts.sets import load_prompts

    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert load_prompts(path, None, "text", None) == read_prompts(None, path) == prompts


@pytest.mark.parametrize(
    "content, problem",
    [
        ("\n", "is empty: give jsonl rows with 'messages', 'prompt' or 'text', or one prompt per line"),
        ('{"body": "x"}\n', "line 1 has no 'messages', 'prompt' or 'text' (found ['body'])"),
        ('{"prompt": "x"}\n{"messages": []}\n', "line 2: 'messages' must be a string or a non-empty list"),
        ('{"prompt": "x"}\n{oops\n', "line 2 is not valid JSON"),
    ],
)
def test_locate_and_infer_refuse_a_prompt_file_with_the_same_words(tmp_path, content, problem):
    from wemask_cli.commands.infer import read_prompts
    from wemask_cli.prompts.sets import load_prompts
    from wemask_cli.runtime.errors import WeMaskError

    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(WeMaskError) as locate_err:
        load_prompts(path, None, "text", None)
    with pytest.raises(WeMaskError) as infer_err:
        read_prompts(None, path)
    assert problem in str(locate_err.value)
    assert str(infer_err.value) == str(locate_err.value).replace("--prompts", "--input")
