"""vLLM's internals through wemask_cli.compat.vllm (the canary), the guarded plugin, every model loader, memory
sizing and start-up failures in one line, checks before the weights load. Run in the "vllm" environment."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_main
from test_vllm import LlamaForCausalLM
from vllm_support import require_vllm

from wemask_cli.method.config import WeMaskConfig

ROOT = Path(__file__).resolve().parents[1]
FAKE_CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 3, "hidden_size": 4,
               "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}  # fmt: skip


@pytest.fixture(autouse=True)
def vllm_present():
    require_vllm()


def test_every_vllm_internal_wemask_relies_on_is_where_it_was():
    """The canary: each private name compat/vllm.py reaches exists with the parameters it passes (a vLLM or TRL
    release that moved one fails here, naming it), including the loaders that override load_model."""
    from wemask_cli.compat.vllm import internals

    checked = internals()
    from wemask_cli.compat.vllm import VLLM_CLASSES

    for name in ("BaseModelLoader.load_model", "TensorizerLoader.load_model", "ModelExpressModelLoader.load_model", "IpcModelLoader.load_model",
                 "dispatch_cpu_unquantized_gemm", "compile attributes", "vllm_generation.LLM", "GRPOConfig.use_vllm",
                 *(f"ModelRegistry: {name}" for name in VLLM_CLASSES)):  # fmt: skip
        assert any(name in entry for entry in checked), (name, checked)
    assert len(VLLM_CLASSES) == 13


@pytest.fixture(scope="module")
def meta_models(tmp_path_factory):
    """A model of each class the vLLM mask covers, built by vLLM on the meta device from a tiny config of its family
    (tests/test_vllm_families.py's), in this process (a single-process gloo group): no weights, no engine."""
    from conftest import make_tiny_model
    from test_vllm_families import FAMILY_EXTRA, VLLM_FAMILIES, VLLM_SHAPE
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel, parallel_state
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.models.registry import ModelRegistry

    ours = not model_parallel_is_initialized()
    lent_ep = not ours and parallel_state._EP is None  # a dense engine earlier in this process made no expert group
    if lent_ep:  # the MoE classes ask for one: a single-rank group for this module
        parallel_state._EP = parallel_state.init_model_parallel_group(
            [[0]], parallel_state.get_world_group().local_rank, torch.distributed.get_backend(), group_name="ep")
    if ours:
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{tmp_path_factory.mktemp('dist')}/init")
        with set_current_vllm_config(VllmConfig()):
            initialize_model_parallel(1, 1)
    from vllm.model_executor.layers import rotary_embedding

    ropes = dict(rotary_embedding._ROPE_DICT)  # vLLM caches each RoPE it builds: these ones hold meta tensors
    models = {}
    for family, architecture in VLLM_FAMILIES.items():
        folder = tmp_path_factory.mktemp(family)
        make_tiny_model(family, **{**VLLM_SHAPE, **FAMILY_EXTRA.get(family, {})}).config.save_pretrained(folder)
        config = VllmConfig(model_config=ModelConfig(model=str(folder), tokenizer=None, skip_tokenizer_init=True, dtype="float32"))
        cls, _ = ModelRegistry.resolve_model_cls([architecture], config.model_config)
        with set_current_vllm_config(config), torch.device("meta"):
            models[cls.__name__] = cls(vllm_config=config)
    yield models
    rotary_embedding._ROPE_DICT.clear()  # so the engines later in this process build real ones
    rotary_embedding._ROPE_DICT.update(ropes)
    if lent_ep:
        parallel_state._EP.destroy()
        parallel_state._EP = None
    if ours:  # the engines the later tests start set up their own
        from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()


def test_canary_every_covered_class_keeps_its_layers_where_the_mask_reads_them_and_swaps_its_attention_class(meta_models):
    """All 13 classes of compat/vllm.py's VLLM_CLASSES, as vLLM builds them: the decoder layers, each layer's
    attention, norms and FFN under the names the mask reads, the attention's forward(positions, hidden_states), and the
    class swap the mask makes on every layer's attention (and back); then the mask's own install on each."""
    from wemask_cli.compat.vllm import VLLM_CLASSES, check_model
    from wemask_cli.engines.vllm.tensor_mask import BUFFER, masked_class, set_masked_forward, vllm_layer_parts

    assert set(meta_models) == set(VLLM_CLASSES)
    for name, model in meta_models.items():
        assert check_model(model)[0].startswith(f"{name}: {len(model.model.layers)} x "), name
        part = vllm_layer_parts(model)[0]
        base = type(part.attention)
        set_masked_forward(part, True)
        assert type(part.attention) is masked_class(base) and hasattr(part.attention, BUFFER), name
        set_masked_forward(part, False)
        assert type(part.attention) is base and not hasattr(part.attention, BUFFER), name


def test_a_moved_layer_attribute_is_one_line_naming_the_class(meta_models, monkeypatch):
    from wemask_cli.compat import CompatError
    from wemask_cli.compat import vllm as compat_vllm

    monkeypatch.setitem(compat_vllm.VLLM_CLASSES, "LlamaForCausalLM", compat_vllm.VllmLayout(attention="attention"))
    with pytest.raises(CompatError, match=r"^vllm 0\.32\.0: layer 0 of LlamaForCausalLM \(LlamaDecoderLayer\) has no attention "
                                          r"under the names wemask reads \(wemask was verified on vllm 0\.32\)"):
        compat_vllm.check_model(meta_models["LlamaForCausalLM"])


def test_a_moved_internal_is_one_line_naming_the_version(monkeypatch):
    from vllm.model_executor.layers import utils

    from wemask_cli.compat import CompatError
    from wemask_cli.compat.vllm import cpu_linear_dispatch

    monkeypatch.setattr(utils, "dispatch_cpu_unquantized_gemm", lambda layer: None)
    with pytest.raises(CompatError, match=r"^vllm 0\.32\.0.*dispatch_cpu_unquantized_gemm no longer takes remove_weight "
                                          r"\(wemask was verified on vllm 0\.32\)"):
        with cpu_linear_dispatch(lambda packed, layer, remove: None):
            pass
    monkeypatch.delattr(utils, "dispatch_cpu_unquantized_gemm")
    with pytest.raises(CompatError, match="dispatch_cpu_unquantized_gemm no longer exists"):
        with cpu_linear_dispatch(lambda packed, layer, remove: None):
            pass


PROBE = """
import sys
from vllm.model_executor.model_loader import base_loader, tensorizer_loader
from wemask_cli.engines.vllm.plugin import register
def wrapped():
    return [getattr(vars(c)["load_model"], "wemask_wrapped", False)
            for c in (base_loader.BaseModelLoader, tensorizer_loader.TensorizerLoader)]
plain, masked = sys.argv[1:3]
sys.argv = ["vllm", "serve", plain]
register()
print("plain", wrapped())
sys.argv = ["vllm", "serve", "--model=" + masked]
register()
print("masked", wrapped())
"""


def test_the_plugin_patches_nothing_unless_the_folder_carries_wemask(tmp_path, tiny_model_dir):
    """`register()` in a vLLM process serving a plain folder leaves vLLM's loaders alone; serving a folder with
    wemask files, it wraps every loader (also tensorizer's, which overrides load_model)."""
    from wemask_cli.interventions import WeMask, save_configs

    masked = tmp_path / "run"
    masked.mkdir()
    save_configs(masked, [WeMask(WeMaskConfig(mask_rate=0.3, me_layer=1))])
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEMASK_VLLM")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE, tiny_model_dir, str(masked)], capture_output=True, text=True,
                         env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plain [False, False]" in out.stdout and "masked [True, True]" in out.stdout, out.stdout


def test_register_never_breaks_a_vllm_process(monkeypatch, capsys):
    from wemask_cli.engines.vllm import plugin

    def broken():
        raise RuntimeError("vLLM moved something")

    monkeypatch.setenv(plugin.PLUGIN_VARIABLE, "1")
    monkeypatch.setattr(plugin, "activate", broken)
    plugin.register()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plugin is off in this process (vLLM moved something)" in err


def fake_folder(tmp_path: Path, **mask) -> Path:
    from wemask_cli.interventions import WeMask, save_configs

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(FAKE_CONFIG))
    if mask:
        save_configs(tmp_path, [WeMask(WeMaskConfig(**mask))])
    return tmp_path


def test_a_loader_that_overrides_load_model_serves_the_mask(tmp_path):
    """A loader with its own load_model (as tensorizer's and modelexpress's) gets the folder's mask too."""
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    from wemask_cli.engines.vllm import current_mask
    from wemask_cli.engines.vllm.plugin import activate

    class OwnLoader(BaseModelLoader):
        def download_model(self, model_config):
            pass

        def load_weights(self, model, model_config):
            pass

        def load_model(self, vllm_config, model_config, prefix=""):
            model = LlamaForCausalLM()
            model.model.do_not_compile = True
            return model

    folder = fake_folder(tmp_path / "run", mask_rate=0.5, me_layer=1, dims={1: [1, 2], 2: [1, 2]})
    activate()
    config = SimpleNamespace(model=str(folder), architectures=["LlamaForCausalLM"])
    model = OwnLoader(SimpleNamespace()).load_model(SimpleNamespace(additional_config={}), config)
    assert current_mask(model) == {1: [1, 2], 2: [1, 2]}


def test_the_armed_message_is_true_in_eager_mode(tmp_path, monkeypatch, caplog):
    """WEMASK_VLLM_ARM=1 on an eager model arms nothing, and says nothing; a compiled model is armed and says so."""
    from wemask_cli.engines.vllm import plugin

    folder = fake_folder(tmp_path / "plain")
    monkeypatch.setenv(plugin.ARM_VARIABLE, "1")
    config = SimpleNamespace(model=str(folder), architectures=["LlamaForCausalLM"])
    for eager in (True, False):
        def build(*_, eager=eager):
            model = LlamaForCausalLM()
            model.model.do_not_compile = eager
            return model

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wemask.vllm"):
            model = plugin.load_masked(build, None, SimpleNamespace(additional_config={}), config)
        armed = any(hasattr(layer.self_attn, "wemask_keep") for layer in model.model.layers)
        assert armed is (not eager) and ("armed" in caplog.text) is (not eager), caplog.text


def test_saved_layers_and_dims_are_checked_before_the_weights_load(tmp_path):
    from wemask_cli.engines.vllm import VllmEngineError, saved_wemask_for_vllm

    with pytest.raises(VllmEngineError, match="does not fit this model.*me_layer=5 is outside the model: it has 3 layers"):
        saved_wemask_for_vllm(fake_folder(tmp_path / "deep", mask_rate=0.5, me_layer=5))
    with pytest.raises(VllmEngineError, match=r"does not fit this model.*recorded dims.*\[0, 4\)"):
        saved_wemask_for_vllm(fake_folder(tmp_path / "wide", mask_rate=0.5, me_layer=1, dims={1: [1, 9], 2: [1, 2]}))


@pytest.mark.parametrize("weights_file", ["model.safetensors", "pytorch_model.bin", "model.pt"])
def test_non_finite_weights_are_refused_before_vllm_starts(monkeypatch, capsys, tmp_path, tiny_model_dir, weights_file):
    """The transformers path's one line (finite.refusal), before any vLLM engine exists, in each weight format
    vLLM loads a folder from."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "nan"
    shutil.copytree(tiny_model_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    weights["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    (folder / "model.safetensors").unlink()
    if weights_file.endswith(".safetensors"):
        save_file(weights, str(folder / weights_file), metadata={"format": "pt"})
    else:
        torch.save(weights, folder / weights_file)
        torch.save(SimpleNamespace(learning_rate=1.0), folder / "training_args.bin")  # a trainer's pickle: not weights
    code, _, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", str(folder), "-p", "Hi")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{folder / weights_file}: tensor model.layers.1.mlp.up_proj.weight holds NaN or infinity: the weights are damaged" in err


def test_memory_is_sized_from_the_job_and_the_users_settings_win(monkeypatch):
    from wemask_cli.engines.vllm.memory import GIB, VllmJob, engine_memory, kv_bytes_per_token

    embedded = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
                "max_position_embeddings": 8192}  # fmt: skip
    assert kv_bytes_per_token(embedded, "float32") == 2 * 30 * 3 * 64 * 4
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    small = engine_memory(embedded, "float32", VllmJob(sequences=2, tokens=100), on_gpu=False)["kv_cache_memory_bytes"]
    big = engine_memory(embedded, "float32", VllmJob(sequences=64, tokens=8192), on_gpu=False)["kv_cache_memory_bytes"]
    assert 8192 * 46080 <= small < 0.5 * GIB and big == 4 * GIB  # one full-context sequence; at most a few GiB
    assert engine_memory(embedded, "float32", VllmJob(memory=1.5), on_gpu=False) == {"kv_cache_memory_bytes": int(1.5 * GIB)}
    assert engine_memory(embedded, "auto", VllmJob(memory=0.4), on_gpu=True) == {"gpu_memory_utilization": 0.4}
    assert engine_memory(embedded, "auto", VllmJob(), on_gpu=True) == {}
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert engine_memory(embedded, "float32", VllmJob(), on_gpu=False) == {}  # the user's own setting


@pytest.mark.parametrize(("flag", "expected"), [("100000", "would take 100000.0 GiB but"), ("0", "--vllm-memory 0 is not valid")])
def test_memory_the_machine_lacks_is_one_line_before_loading(monkeypatch, capsys, tiny_model_dir, flag, expected):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", tiny_model_dir, "-p", "Hi",
                            "--vllm-memory", flag)  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and expected in err and "Traceback" not in err, err


def test_vllm_start_up_failures_name_the_setting(monkeypatch):
    """vLLM-CPU's own memory refusal (its exact text), an unsupported model, a missing kernel: one line each."""
    from wemask_cli.engines.vllm.memory import VllmStartError, start_errors

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "40")
    memory = ValueError("Available memory on node 0 (14.2/23.54 GiB) on kv cache allocation is less than requested "
                        "memory for kv (40.00 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or ...")
    cases = [(memory, "lower --vllm-memory .* \\(you set VLLM_CPU_KVCACHE_SPACE=40 GiB: lower or unset it\\)$"),
             (ValueError("Model architectures ['FooForCausalLM'] are not supported for now."), "use --engine transformers$"),
             (AttributeError("'_OpNamespace' '_C' object has no attribute 'onednn_mm'"), "a missing kernel")]
    for error, expected in cases:
        with pytest.raises(VllmStartError, match=expected) as caught:
            with start_errors("run"):
                raise error
        assert "\n" not in str(caught.value) and str(caught.value).startswith("vLLM could not start on run: ")


def test_the_located_model_is_freed_before_vllm_starts(monkeypatch, tiny_model_dir):
    """--me-layer auto loads the transformers model first: it is gone (and the CUDA cache emptied) when vLLM starts."""
    from wemask_cli.engines.vllm import engine as engine_module
    from wemask_cli.models import loading as models

    seen, load = {}, models.load_model

    def tracked(*args, **kwargs):
        loaded = load(*args, **kwargs)
        seen["model"] = weakref.ref(loaded.model)
        return loaded

    def starting(source, dtype, **_):
        seen.update(alive=seen["model"]() is not None, emptied=seen.get("emptied", False))
        return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=256))

    monkeypatch.setattr(models, "load_model", tracked)
    monkeypatch.setattr(engine_module, "VllmEngine", starting)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: seen.__setitem__("emptied", True))
    request = SimpleNamespace(rates=None, overrides=dict, effective_me_layer=lambda saved: "auto", configs=lambda loaded: [None])
    engine_module.load_vllm(tiny_model_dir, "float32", request)  # a random model has no ME layer to locate: no configs
    assert seen["alive"] is False and seen["emptied"] is True


@pytest.mark.vllm  # without vLLM the command refuses --use-vllm first (tests/test_preflight.py); the check: tests/test_grpo.py
def test_grpo_with_vllm_refuses_4bit_weights_up_front(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--dataset", str(ROOT / "data" / "math_problems.jsonl"),
                            "--output-dir", "unused", "--use-vllm", "--use-peft", "--load-in-4bit")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "--use-vllm with --load-in-4bit" in err, err


class FakeEngine:
    def __init__(self, model):
        self.model = model

    def apply_model(self, fn):
        return [fn(self.model)]

    def reset_prefix_cache(self):
        pass


def test_rollout_masking_reads_trls_settings_through_checked_names(monkeypatch):
    """A TRL that renamed its vLLM settings stops the run (CompatError) instead of leaving rollouts unmasked."""
    from trl import GRPOConfig

    from wemask_cli.compat import CompatError
    from wemask_cli.engines.vllm.colocate import mask_rollouts

    config = WeMaskConfig(mask_rate=0.5, me_layer=1, mode="aware", dims={1: [1, 2], 2: [1, 2]})
    renamed = SimpleNamespace(args=SimpleNamespace(use_vllm=True, vllm_mode="colocate"), llm_engine=FakeEngine(None))
    with pytest.raises(CompatError, match="^trl .*vllm_generation no longer exists"):
        mask_rollouts(renamed, config)
    monkeypatch.delattr(GRPOConfig, "vllm_mode")
    with pytest.raises(CompatError, match="GRPOConfig.vllm_mode no longer exists"):
        mask_rollouts(renamed, config)


def test_after_a_step_the_engine_must_hold_the_trained_models_mask():
    from wemask_cli.engines.vllm import VllmEngineError, install_wemask
    from wemask_cli.engines.vllm.colocate import engine_mask_check, mask_rollouts

    config = WeMaskConfig(mask_rate=0.5, me_layer=1, mode="aware", dims={1: [1, 2], 2: [1, 2]})
    model = LlamaForCausalLM()
    trainer = SimpleNamespace(args=SimpleNamespace(use_vllm=True, vllm_mode="colocate"), state=SimpleNamespace(global_step=3),
                              vllm_generation=SimpleNamespace(llm=FakeEngine(model)))  # fmt: skip
    installed = mask_rollouts(trainer, config)
    check = engine_mask_check(trainer, installed.dims)
    check.on_step_end(None, None, None)  # holds it
    install_wemask(model, None)  # something reset the engine's mask
    with pytest.raises(VllmEngineError, match="after step 3, TRL's vLLM engine holds the mask none but the trained model on layers 1..2"):
        check.on_step_end(None, None, None)


def test_serving_a_masked_folder_refuses_non_finite_weights(tmp_path, monkeypatch):
    """`vllm serve RUN_FOLDER` (the plugin, not wemask, starts the engine): the same one line before loading."""
    from safetensors.torch import save_file

    from wemask_cli.engines.vllm import plugin
    from wemask_cli.runtime.finite import NonFiniteWeights

    folder = fake_folder(tmp_path / "run", mask_rate=0.5, me_layer=1)
    save_file({"lm_head.weight": torch.tensor([[1.0, float("inf")]])}, str(folder / "model.safetensors"))
    monkeypatch.delenv(plugin.ARM_VARIABLE, raising=False)
    config = SimpleNamespace(model=str(folder), architectures=["LlamaForCausalLM"])
    with pytest.raises(NonFiniteWeights, match="tensor lm_head.weight holds NaN or infinity"):
        plugin.load_masked(lambda *_: pytest.fail("the weights loaded"), None, SimpleNamespace(additional_config={}), config)
