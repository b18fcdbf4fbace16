"""WeMask in vLLM (wemask_cli.engines.vllm): refusals before loading, and one in-process vLLM engine on the
embedded model compared with the transformers hooks (greedy tokens, log-probabilities, perplexity, the CLI)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_main
from vllm_support import ME_LAYER, masked_run_folder, require_vllm

from wemask_cli.method.config import WeMaskConfig

PACKAGE = Path(__file__).resolve().parents[1] / "wemask_cli"
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about rain.",
    "A bus has 27 passengers. At the first stop 2 people get off and 9 people get on. How many passengers are there now?",
]
NEW_TOKENS = 24


def test_only_engines_vllm_imports_vllm():
    """vLLM is an optional engine: no module outside wemask_cli/engines/vllm/ (and compat/vllm.py, its internals)
    imports it."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if PACKAGE / "engines" / "vllm" in path.parents or path == PACKAGE / "compat" / "vllm.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name == "vllm" or name.startswith("vllm.") for name in names):
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def test_missing_vllm_skips_but_fails_under_ci(monkeypatch):
    import vllm_support

    monkeypatch.setattr(vllm_support.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and vLLM is not installed"):
        require_vllm()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="vLLM is not installed"):
        require_vllm()


def test_engines_vllm_imports_without_vllm(monkeypatch):
    """Installing a mask needs torch only; vLLM absent is one line naming the install and the transformers engine."""
    from wemask_cli.engines.vllm import VllmEngineError
    from wemask_cli.engines.vllm.support import require_vllm as require

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(VllmEngineError, match=r"vLLM is not installed .*--engine transformers"):
        require()


def test_cli_vllm_absent_is_one_line(monkeypatch, capsys, embedded_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)
    code, out, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", embedded_dir, "-p", "Hi")
    assert code == 2 and "vLLM is not installed" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--select", "activation", "--mask-rate", "0.3", "--me-layer", "11"], "select='activation'"),
        (["--engine", "tensorrt"], "--engine 'tensorrt' is unknown"),
        (["--tokens", "massive", "--mask-rate", "0.3", "--me-layer", "11"], "use --engine transformers for --tokens massive"),
    ],
)
def test_cli_refusals_before_loading(monkeypatch, capsys, embedded_dir, flags, expected):
    require_vllm()
    engine = [] if "--engine" in flags else ["--engine", "vllm"]
    code, _, err = run_main(monkeypatch, capsys, "infer", *engine, "--model", embedded_dir, "-p", "Hi", *flags)
    assert code == 2 and expected in err and "Traceback" not in err


def test_a_lora_folder_is_refused_naming_wemask_merge(monkeypatch, capsys, tmp_path, tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    require_vllm()
    adapter = tmp_path / "lora"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)
    capsys.readouterr()  # transformers' loading bar above
    code, _, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", str(adapter), "-p", "Hi")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"merge it into one with `wemask merge {adapter} -o MERGED` (then --model MERGED), or use --engine transformers" in err


def test_massive_tokens_and_remedies_are_refused(tmp_path):
    """What vLLM cannot run names the transformers path: --tokens massive, and folders carrying remedies."""
    from wemask_cli.engines.vllm import VllmEngineError, saved_wemask_for_vllm
    from wemask_cli.engines.vllm.tensor_mask import check_config
    from wemask_cli.interventions import WeMask, config_from_dict, save_configs

    with pytest.raises(VllmEngineError, match="--engine transformers for --tokens massive"):
        check_config(WeMaskConfig(mask_rate=0.3, me_layer=1, tokens="massive"))
    save_configs(tmp_path, [WeMask(WeMaskConfig(mask_rate=0.3, me_layer=1)), config_from_dict({"kind": "pre_affine"})],
                 weights={"pre_affine.0.attn.scale": torch.ones(4)})
    with pytest.raises(VllmEngineError, match=r"carries pre_affine.*--engine transformers"):
        saved_wemask_for_vllm(tmp_path)


def test_an_uncovered_architecture_is_one_line(tmp_path):
    from wemask_cli.engines.vllm import VllmEngineError
    from wemask_cli.engines.vllm.support import check_folder_architecture
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(VllmEngineError, match="GPT2LMHeadModel is not covered.*--engine transformers"):
        check_folder_architecture(tmp_path)


class EchoAttention(torch.nn.Module):
    def forward(self, positions, hidden_states):
        return hidden_states


class FakeLayer(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.self_attn, self.mlp = EchoAttention(), torch.nn.Identity()
        self.input_layernorm, self.post_attention_layernorm = torch.nn.RMSNorm(4), torch.nn.RMSNorm(4)
        self.input_layernorm.weight.data = weight


class LlamaForCausalLM(torch.nn.Module):
    """vLLM's layout (model.layers[i].self_attn(positions=, hidden_states=)), without vLLM."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList(FakeLayer(torch.tensor([0.1, 3.0, -2.0, 0.5])) for _ in range(3))


def test_mask_is_a_tensor_op_on_positions_zero():
    """Top-|w| dims, from the ME layer on, only where positions == 0 (each packed sequence's start)."""
    from wemask_cli.engines.vllm import install_wemask

    model = LlamaForCausalLM()
    installed = install_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=1, strength=0.75))
    assert installed.masked_layers == [1, 2] and installed.config.dims == {1: [1, 2], 2: [1, 2]}
    positions, hidden = torch.tensor([0, 1, 2, 0, 1]), torch.ones(5, 4)
    out = [layer.self_attn(positions=positions, hidden_states=hidden) for layer in model.model.layers]
    assert torch.equal(out[0], hidden)
    assert out[1][[0, 3]].tolist() == [[1.0, 0.25, 0.25, 1.0]] * 2 and torch.equal(out[1][[1, 2, 4]], hidden[:3])
    install_wemask(model, None)
    assert all(torch.equal(layer.self_attn(positions=positions, hidden_states=hidden), hidden) for layer in model.model.layers)


def test_direction_is_the_same_tensor_op_and_zero_is_exact():
    """select='direction' removes alpha <h, v> v where positions == 0, as the transformers hook computes it; every
    other token, and every layer at alpha = 0, is exactly its input."""
    from wemask_cli.engines.vllm import VllmEngineError, current_mask, install_wemask
    from wemask_cli.method.direction import remove_direction

    model = LlamaForCausalLM()
    unit = torch.nn.functional.normalize(torch.tensor([1.0, 2.0, -1.0, 0.5]), dim=0)
    config = WeMaskConfig(mask_rate=1.0, me_layer=1, select="direction", strength=0.5, vectors={1: unit, 2: unit})
    install_wemask(model, config)
    assert current_mask(model) == {1: [], 2: []}
    positions, hidden = torch.tensor([0, 1, 2, 0, 1]), torch.randn(5, 4)
    out = [layer.self_attn(positions=positions, hidden_states=hidden) for layer in model.model.layers]
    first = (positions == 0).unsqueeze(-1)
    assert torch.equal(out[0], hidden) and torch.equal(out[2][[1, 2, 4]], hidden[[1, 2, 4]])
    assert torch.equal(out[1], remove_direction(hidden, first, unit, unit * 0.5))
    assert torch.allclose(out[1][[0, 3]] @ unit, 0.5 * (hidden[[0, 3]] @ unit), atol=1e-6)
    # a compiling model is armed: every layer runs the code, and alpha = 0 gives every layer's input exactly
    install_wemask(model, config.with_updates(strength=0.0))
    assert all(torch.equal(layer.self_attn(positions=positions, hidden_states=hidden), hidden) for layer in model.model.layers)
    with pytest.raises(VllmEngineError, match="needs its massive direction"):
        install_wemask(model, config.with_updates(me_layer=2))


def test_eager_model_carries_the_mask_on_masked_layers_only():
    """enforce_eager (do_not_compile): unmasked layers keep vLLM's own class, and r = 0 leaves none."""
    from wemask_cli.engines.vllm import install_wemask

    model = LlamaForCausalLM()
    model.model.do_not_compile = True
    install_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=2))
    assert [type(layer.self_attn).__name__ for layer in model.model.layers] == ["EchoAttention"] * 2 + ["WeMaskedEchoAttention"]
    install_wemask(model, WeMaskConfig(mask_rate=0.0))
    assert {type(layer.self_attn) for layer in model.model.layers} == {EchoAttention}


def test_install_after_compile_on_an_unarmed_model_is_refused():
    """A graph compiled before arming never runs the mask: refused, not silently ignored."""
    from wemask_cli.engines.vllm import VllmEngineError, install_wemask

    model = LlamaForCausalLM()
    model.model.compiled = True
    with pytest.raises(VllmEngineError, match="WEMASK_VLLM_ARM=1"):
        install_wemask(model, WeMaskConfig(mask_rate=0.5, me_layer=1))


# ------------------------------------------------------------------ one vLLM engine for the rest of the module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, embedded_dir, embedded) -> Path:
    return masked_run_folder(tmp_path_factory.mktemp("vllm-run") / "run", embedded_dir, embedded)


@pytest.fixture(scope="module")
def engine(run_dir):
    """The run folder in vLLM: the plugin installs its saved r=1.0 mask when the model loads."""
    require_vllm()
    from wemask_cli.engines.vllm.engine import VllmEngine

    return VllmEngine(str(run_dir), "float32")


@pytest.fixture
def shared_engine(monkeypatch, engine, run_dir):
    """The CLI's `--engine vllm` on this module's engine (one load for the module)."""
    from wemask_cli.engines.vllm import engine as engine_module

    def reuse(source, dtype, **_):
        assert source == str(run_dir) and dtype == "float32"
        return engine

    monkeypatch.setattr(engine_module, "VllmEngine", reuse)
    return engine


def test_plugin_installs_the_folders_mask_at_load(engine, run_dir):
    from wemask_cli.engines.vllm import current_mask

    saved = WeMaskConfig.load(run_dir)
    assert engine.llm.apply_model(current_mask)[0] == saved.dims  # before any install_wemask call
    assert len(saved.dims) == 30 - ME_LAYER and all(len(d) == 576 for d in saved.dims.values())


def hf_greedy(embedded, config, encoded) -> list[list[int]]:
    from wemask_cli.engines.transformers import TransformersEngine

    out = []
    with TransformersEngine(embedded).use_mask(config):
        for ids in encoded:
            generated = embedded.model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                                pad_token_id=embedded.tokenizer.pad_token_id)
            out.append(generated[0, len(ids):].tolist())
    return out


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


@pytest.mark.parametrize(("rate", "select"), [(0.0, "weight"), (0.3, "weight"), (1.0, "weight"), (1.0, "direction")])
def test_greedy_tokens_match_transformers(engine, embedded, rate, select, capsys):
    """Same greedy tokens as the transformers hooks; where a float32 kernel difference flips a near-tie, the
    log-probabilities of everything before the flip agree within 1e-3 and the two tokens were a near-tie.
    select='direction': the massive direction estimated once (as `wemask infer/eval` do), the same in both."""
    from wemask_cli.engines.transformers import TransformersEngine
    from wemask_cli.mask_request.flags import with_direction
    from wemask_cli.prompts.rendering import encode_left_truncated

    (config,) = with_direction([WeMaskConfig(mask_rate=rate, me_layer=ME_LAYER, select=select)], embedded)
    encoded, _, _ = encode_left_truncated(embedded.tokenizer, PROMPTS, True, None)
    expected = hf_greedy(embedded, config, encoded)
    with engine.use_mask(config) as resolved:
        found = engine.generate_ids(encoded, max_new_tokens=NEW_TOKENS, temperature=0.0, top_p=1.0, seed=0)
        flips = [(i, first_difference(e, f)) for i, (e, f) in enumerate(zip(expected, found)) if e != f]
        sequences = [ids + e for ids, e in zip(encoded, expected)]
        ours = engine.token_logprobs(sequences)
    transformers_engine = TransformersEngine(embedded)
    with transformers_engine.use_mask(config) as hf_resolved:
        theirs = transformers_engine.token_logprobs(sequences)
    assert resolved.dims == hf_resolved.dims  # the same dims as the transformers hook (None at r = 0)
    for index, (ids, a, b) in enumerate(zip(encoded, ours, theirs)):
        flip = dict(flips).get(index)
        upto = len(ids) - 1 + (flip if flip is not None else NEW_TOKENS)
        assert torch.allclose(a[:upto], b[:upto], atol=1e-3), (index, (a[:upto] - b[:upto]).abs().max())
    for index, position in flips:  # a flip must be a near-tie under the transformers model
        print(f"r={rate}: prompt {index} first differs at generated token {position}")
        context = torch.tensor([encoded[index] + expected[index][:position]])
        with transformers_engine.use_mask(config):
            logp = torch.log_softmax(embedded.model(context).logits[0, -1].float(), -1)
        assert logp[expected[index][position]] - logp[found[index][position]] < 1e-3
    assert len(flips) <= 1, flips


def test_mask_changes_output_and_zero_is_exact(engine):
    """r=1 from layer 11 changes the continuation; installing r=0 afterwards gives the unmasked logits exactly."""
    from wemask_cli.engines.vllm import current_mask

    sequence = engine_ids(engine, "The capital of France is Paris. The capital of Italy is Rome.")
    plain = engine.token_logprobs([sequence])[0]
    with engine.use_mask(WeMaskConfig(mask_rate=1.0, me_layer=ME_LAYER)):
        masked_nll = -float(engine.token_logprobs([sequence])[0].mean())
    assert engine.llm.apply_model(current_mask)[0] == {}
    again = engine.token_logprobs([sequence])[0]
    assert torch.equal(plain, again) and masked_nll > -float(plain.mean()) + 0.5


def engine_ids(engine, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(engine.llm.llm_engine.model_config.model)(text).input_ids


def eval_metrics(monkeypatch, capsys, out: Path, *flags) -> dict:
    code, _, err = run_main(monkeypatch, capsys, "eval", *flags, "--output", str(out), "--overwrite")
    assert code == 0, err
    return json.loads((out / "metrics.json").read_text())


def test_eval_perplexity_agrees_and_rows_carry_engine(monkeypatch, capsys, tmp_path, shared_engine, run_dir):
    flags = ["--model", str(run_dir), "--task", "perplexity", "--limit", "4", "--mask-rates", "0,1.0", "--dtype", "float32"]
    theirs = eval_metrics(monkeypatch, capsys, tmp_path / "hf", *flags)
    ours = eval_metrics(monkeypatch, capsys, tmp_path / "vllm", *flags, "--engine", "vllm")
    assert ours["engine"] == "vllm" and ours["provenance"]["versions"]["vllm"]
    pick = lambda doc: {(r["mask_rate"], r["metric"]): r["value"] for r in doc["results"]}  # noqa: E731
    assert {r["engine"] for r in ours["results"]} == {"vllm"} and {r["engine"] for r in theirs["results"]} == {"transformers"}
    for key, value in pick(theirs).items():
        assert pick(ours)[key] == pytest.approx(value, rel=1e-3), key
    assert pick(ours)[(1.0, "perplexity")] > pick(ours)[(0.0, "perplexity")]
    assert "engine" in (tmp_path / "vllm" / "results.csv").read_text().splitlines()[0]


def test_eval_choice_and_math_on_vllm(monkeypatch, capsys, tmp_path, shared_engine, run_dir):
    """choice from prompt log-probabilities, math from generation: the same scores as transformers."""
    for task, extra in (("choice", ["--limit", "6"]), ("math", ["--limit", "4", "--max-new-tokens", "32"])):
        flags = ["--model", str(run_dir), "--task", task, "--mask-rates", "0,0.3", "--me-layer", "11", *extra]
        theirs = eval_metrics(monkeypatch, capsys, tmp_path / f"{task}-hf", *flags)
        ours = eval_metrics(monkeypatch, capsys, tmp_path / f"{task}-vllm", *flags, "--engine", "vllm")
        values = lambda doc: [(r["mask_rate"], r["metric"], round(r["value"], 6)) for r in doc["results"]]  # noqa: E731
        assert values(ours) == values(theirs), task


def test_infer_on_vllm_matches_transformers(monkeypatch, capsys, tmp_path, shared_engine, run_dir):
    """`wemask infer --engine vllm` on a masked run folder: its saved mask, the same completions and records."""
    outputs = {}
    for engine in ("transformers", "vllm"):
        path = tmp_path / f"{engine}.jsonl"
        code, out, err = run_main(monkeypatch, capsys, "infer", "--model", str(run_dir), "--engine", engine,
                                  "-p", PROMPTS[0], "-p", PROMPTS[1], "--max-new-tokens", "16", "--output", str(path))
        assert code == 0, err
        outputs[engine] = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["engine"] for r in outputs["vllm"]] == ["vllm", "vllm"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "engine"} for r in rows]  # noqa: E731
    assert strip(outputs["vllm"]) == strip(outputs["transformers"])
    assert outputs["vllm"][0]["wemask"]["mask_rate"] == 1.0
