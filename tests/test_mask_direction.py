"""select='direction': the basis-free mask h~ = h - alpha <h, v> v on the first token (SPEC section 6), on tiny models.

Padding, packing and cached decoding are checked for it with the dims masks in test_mask.py (the `mask` fixture).
"""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny_model
from test_mask import IDS, capture_attention_inputs, logits

from wemask_cli import WeMaskConfig, apply_wemask
from wemask_cli.method.config import DIRECTION_FILE, WeMaskConfigError
from wemask_cli.method.wemask_hook import AttentionInputMask

ME = 1
PROMPTS = [torch.tensor([[5, 17, 42, 9]]), torch.tensor([[5, 60, 3, 81, 20]]), torch.tensor([[7, 2, 90]])]


def direction(**changes) -> WeMaskConfig:
    return WeMaskConfig(**{"mask_rate": 1.0, "me_layer": ME, "select": "direction", **changes})


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_removes_alpha_of_the_first_tokens_component_only(arch, alpha):
    model = make_tiny_model(arch)
    handle = apply_wemask(model, direction(strength=alpha), calibration_input_ids=PROMPTS)
    before, _ = capture_attention_inputs(model, before_wemask=True)
    after, _ = capture_attention_inputs(model)
    model(input_ids=IDS, use_cache=False)
    vectors = handle.config.vectors
    assert sorted(vectors) == [1, 2, 3] and handle.config.direction["prompts"] == len(PROMPTS)
    for layer in range(4):
        assert torch.equal(after[layer][0, 1:], before[layer][0, 1:]), f"layer {layer}: another token was edited"
        if layer < ME:
            assert torch.equal(after[layer][0, 0], before[layer][0, 0])
            continue
        v = vectors[layer]
        assert float(v.norm()) == pytest.approx(1.0, abs=1e-6)
        kept = float(after[layer][0, 0] @ v)
        assert kept == pytest.approx((1 - alpha) * float(before[layer][0, 0] @ v), abs=1e-4)
        orthogonal = after[layer][0, 0] - kept * v
        torch.testing.assert_close(orthogonal, before[layer][0, 0] - float(before[layer][0, 0] @ v) * v, atol=1e-5, rtol=0)
        assert abs(float(before[layer][0, 0] @ v)) > 1e-3


def test_direction_is_the_mean_first_token_input_over_the_prompts():
    model = make_tiny_model("llama")
    handle = apply_wemask(model, direction(), calibration_input_ids=PROMPTS)
    handle.remove()
    seen, hooks = capture_attention_inputs(model)
    firsts = {layer: [] for layer in range(4)}
    for ids in PROMPTS:
        model(input_ids=ids, use_cache=False)
        for layer in range(4):
            firsts[layer].append(seen[layer][0, 0])
    for hook in hooks:
        hook.remove()
    for layer in (1, 2, 3):
        mean = torch.stack(firsts[layer]).mean(0)
        torch.testing.assert_close(handle.config.vectors[layer], mean / mean.norm(), atol=1e-6, rtol=0)
        assert handle.config.direction["norms"][str(layer)] == pytest.approx(float(mean.norm()), rel=1e-5)


def test_alpha_zero_is_bitwise_identity():
    model = make_tiny_model("qwen3")
    plain = logits(model, input_ids=IDS)
    with apply_wemask(model, direction(strength=0.0)) as handle:
        assert handle.hooked_layers == [] and torch.equal(logits(model, input_ids=IDS), plain)
    # the hook itself at alpha = 0 (as the vLLM engine's armed layers run it): exactly the input
    hidden = torch.randn(2, 5, 64)
    unit = torch.nn.functional.normalize(torch.randn(64), dim=0)
    hook = AttentionInputMask(0, torch.tensor([]), torch.ones(64), direction=(unit, unit * 0.0))
    _, kwargs = hook(torch.nn.Identity(), (), {"hidden_states": hidden, "position_ids": torch.tensor([[0, 1, 2, 0, 1]] * 2)})
    assert torch.equal(kwargs["hidden_states"], hidden)
    with apply_wemask(model, direction()):
        assert not torch.allclose(logits(model, input_ids=IDS), plain)


def test_saved_direction_reloads_and_is_checked(tmp_path):
    model = make_tiny_model("llama")
    handle = apply_wemask(model, direction(strength=0.5), calibration_input_ids=PROMPTS)
    masked = logits(model, input_ids=IDS)
    handle.config.save(tmp_path)
    assert (tmp_path / DIRECTION_FILE).is_file()
    saved = WeMaskConfig.load(tmp_path)
    assert saved.direction == handle.config.direction and "vectors" not in saved.to_dict()
    assert saved.with_updates(strength=1.0).vectors is saved.vectors  # alpha does not change the direction
    assert saved.with_updates(me_layer=2).vectors is None  # the masked layers do
    fresh = make_tiny_model("llama")
    apply_wemask(fresh, saved)
    assert torch.equal(logits(fresh, input_ids=IDS), masked)
    (tmp_path / DIRECTION_FILE).unlink()
    with pytest.raises(WeMaskConfigError, match="is missing"):
        WeMaskConfig.load(tmp_path)
    # a direction recorded for other layers does not fit
    with pytest.raises(WeMaskConfigError, match="does not fit"):
        apply_wemask(fresh, direction(me_layer=2, vectors=dict(saved.vectors)))


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"tokens": "massive"}, "undefined for tokens='massive'"), ({"mask_rate": 0.3}, "use --mask-rate 1")],
)
def test_refused_settings(changes, message):
    with pytest.raises(WeMaskConfigError, match=message):
        direction(**changes)


def test_sft_aware_and_free_save_the_direction_and_reload_it(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from conftest import run_main
    from test_sft import losses, sft

    from wemask_cli.mask_request.flags import MaskRequest
    from wemask_cli.method.wemask_hook import masked_layers
    from wemask_cli.models.loading import load_model

    plain = sft(tmp_path / "plain", tiny_model_dir)
    runs = {mode: sft(tmp_path / mode, tiny_model_dir, mask_rate="1", me_layer="1", select="direction", strength=0.5, mode=mode)
            for mode in ("aware", "free")}
    assert losses(runs["free"]) == losses(plain) and losses(runs["aware"])[0] != pytest.approx(losses(plain)[0], abs=1e-6)
    assert masked_layers(runs["aware"].trainer.model) == [1, 2, 3] and masked_layers(runs["free"].trainer.model) == []
    for mode, result in runs.items():
        folder = tmp_path / mode
        assert (folder / DIRECTION_FILE).is_file()
        loaded = load_model(str(folder), dtype="float32")
        saved = loaded.saved_wemask
        assert (saved.select, saved.strength, saved.mode, saved.direction["prompts"]) == ("direction", 0.5, mode, 4)
        (config,) = MaskRequest().configs(loaded)  # what `wemask infer --model RUN` does: the saved vectors, not new ones
        assert all(torch.equal(config.vectors[l], result.wemask.vectors[l].float()) for l in (1, 2, 3))
    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(tmp_path / "aware"), "--prompt", "Hello",
                              "--max-new-tokens", "4", "--dtype", "float32")
    assert code == 0, err
    assert "massive direction removed (alpha=0.5)" in out + err


def test_direction_with_massive_tokens_is_one_line(monkeypatch, capsys, tiny_model_dir):
    from conftest import run_main

    code, out, err = run_main(monkeypatch, capsys, "infer", "--model", tiny_model_dir, "--prompt", "Hi", "--mask-rate", "1",
                              "--select", "direction", "--tokens", "massive")
    assert code == 2 and "undefined for tokens='massive'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
