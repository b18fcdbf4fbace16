"""The quantization-scheme registry (wemask_cli/eval/quantize/schemes.py): a scheme declared once, outside the
package too, reaches --quantize's parsing, its error lines, `wemask eval --help` and a real eval run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, run_main
from test_startup import RUN_BLOCKED

from wemask_cli.eval.quantize import SCHEMES, Grid, Scheme, parse_schemes, quantize_int, register, simulate
from wemask_cli.eval.quantize.schemes import block_size_help, quantize_help
from wemask_cli.runtime.errors import WeMaskError

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def toy(monkeypatch):
    """tests/toy_quant_scheme.py imported afresh (its import registers `toy_bf16`); the registry restored after."""
    monkeypatch.delitem(sys.modules, "toy_quant_scheme", raising=False)
    with SCHEMES.restoring():
        import toy_quant_scheme

        yield toy_quant_scheme


def test_the_builtin_schemes_are_the_documented_ones():
    assert list(SCHEMES) == ["none", "w8a8", "w4a8", "w4a4", "fp4"]
    grids = {name: (s.weights and s.weights.name, s.inputs and s.inputs.name) for name, s in SCHEMES.entries().items()}
    assert grids == {"none": (None, None), "w8a8": ("int8", "int8"), "w4a8": ("int4", "int8"),
                     "w4a4": ("int4", "int4"), "fp4": ("fp4", "fp4")}
    assert [name for name, s in SCHEMES.entries().items() if s.block_sizes] == ["fp4"] and SCHEMES.get("fp4").block_sizes == (16, 32)
    assert block_size_help() == "--quantize fp4: values per scale block (16 or 32)."


def test_a_registered_scheme_is_parsed_listed_and_refused_like_the_builtins(toy):
    assert parse_schemes("none,TOY_BF16") == ["none", "toy_bf16"]
    assert "toy_bf16 (toy: bfloat16 weights and inputs, from tests/)" in quantize_help()
    with pytest.raises(WeMaskError, match="unknown quantization scheme 'w3a3': choose from none, w8a8, w4a8, w4a4, fp4, toy_bf16$"):
        parse_schemes("w3a3")
    clash = r"name clash: \S*test_quantize_registry.toy_bf16 registers the quantization scheme .toy_bf16., which is already toy_quant_scheme"
    with pytest.raises(ValueError, match=clash + r"\.toy_bf16$"):
        register(Scheme("toy_bf16", None, None, "again", module=__name__))
    with pytest.raises(ValueError, match="lower case"):
        register(Scheme("Toy,2", None, None, "bad name"))


def test_block_sizes_are_checked_per_scheme(toy):
    register(Scheme("toy_blocks", toy.BF16, toy.BF16, "toy with blocks of 8", block_sizes=(8,)))
    assert parse_schemes("toy_blocks", block_size=8) == ["toy_blocks"]
    with pytest.raises(WeMaskError, match="--fp4-block-size must be one of 16, 32, not 8"):
        parse_schemes("fp4,toy_blocks", block_size=8)
    with pytest.raises(WeMaskError, match="--fp4-block-size must be one of 8, not 16"):
        parse_schemes("toy_blocks")
    with pytest.raises(WeMaskError, match="--fp4-block-size must be one of 8, 16, 32, not 64"):
        parse_schemes("w8a8", block_size=64)  # no chosen scheme has blocks: a size some scheme takes
    assert block_size_help() == "--quantize fp4, toy_blocks: values per scale block (8 or 16 or 32)."


def test_a_scheme_that_rounds_only_inputs_is_applied(toy):
    """Full-precision weights, INT8 inputs: the inputs are still rounded (an early exit for weights=None skipped them)."""
    register(Scheme("toy_a8", None, Grid("int8", lambda x, block_size: quantize_int(x, 8)), "INT8 inputs only"))
    model = make_tiny_model("llama")
    ids = torch.tensor([[1, 5, 9, 2, 7, 3]])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with simulate(model, "toy_a8"):
            assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # weights untouched
            rounded = model(input_ids=ids).logits
    assert not torch.equal(rounded, plain)


def test_eval_help_lists_a_scheme_registered_outside_the_package_without_torch():
    script = RUN_BLOCKED.replace("from wemask_cli.cli import main", f"sys.path.insert(0, {str(TESTS)!r})\n"
                                 "import toy_quant_scheme\nfrom wemask_cli.cli import main")
    done = subprocess.run([sys.executable, "-c", script, "eval", "--help"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.replace("│", " ").split())
    assert "fp4 (FP4 E2M1 weights and inputs, one scale per block), toy_bf16 (toy: bfloat16 weights and inputs, from tests/)." in text


def test_eval_runs_a_scheme_registered_outside_the_package(toy, monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "eval"
    code, stdout, stderr = run_main(
        monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--window", "32", "--limit", "2",
        "--quantize", "none,toy_bf16", "-o", str(out),
    )
    assert code == 0, stderr
    document = json.loads((out / "metrics.json").read_text())
    rows = {r["quantize"]: r for r in document["results"] if r["metric"] == "perplexity"}
    assert list(rows) == ["none", "toy_bf16"] and rows["toy_bf16"]["value"] != rows["none"]["value"]
    assert rows["toy_bf16"]["delta_quantize"] == pytest.approx(rows["toy_bf16"]["value"] - rows["none"]["value"])
    assert [q["quantize"] for q in document["quantization"]] == ["none", "toy_bf16"]
    assert "toy_bf16" in (out / "results.csv").read_text() and "toy_bf16" in stdout
    shapes = set(toy.CALLS)
    assert any(len(shape) == 2 for shape in shapes)  # weights (out, in) rounded once
    assert any(len(shape) == 3 for shape in shapes)  # inputs (batch, tokens, features) rounded in the forward
