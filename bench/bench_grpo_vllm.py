"""An aware GRPO step (WeMask r = 0.3 from layer 11, LoRA r = 8) with vLLM rollouts against one with generate()
rollouts, on the embedded SmolLM2-135M, float32, in one process.

Two TRL GRPOTrainers share one hooked PEFT model: one generates with TRL's colocated vLLM engine (the mask installed
in it, its weights synced every step, LoRA merged), the other with transformers generate() (the hooks). Each step
is TRL's training_step (rollouts of 4 completions x 24 tokens, rewards, log-probability passes, loss, backward) and
the optimizer step, the two trainers alternating; medians reported, first step of each discarded (warm-up).
"""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path

import torch

from wemask_cli import WeMaskConfig, apply_wemask

ROOT = Path(__file__).resolve().parents[1]
CONFIG = WeMaskConfig(mask_rate=0.3, me_layer=11, mode="aware")
REPEATS, WARM_UP = 4, True
BATCH, COMPLETION_TOKENS, MAX_MODEL_LENGTH = 4, 24, 512
NEEDS = ("vllm",)
SMOKE = {"REPEATS": 1, "WARM_UP": False, "BATCH": 2, "COMPLETION_TOKENS": 4}


def build(tmp: str):
    """(generate() trainer, vLLM trainer) over one hooked PEFT model, and the hooks' handle."""
    from peft import LoraConfig, get_peft_model
    from trl import GRPOConfig, GRPOTrainer

    from wemask_cli.data import load_training_data
    from wemask_cli.data.formats import PROMPTS
    from wemask_cli.engines.vllm.colocate import colocated_engine, mask_rollouts
    from wemask_cli.engines.vllm.memory import VllmJob
    from wemask_cli.models.loading import load_model
    from wemask_cli.rewards import format_reward
    from wemask_cli.train.resolve import hardware_defaults
    from wemask_cli.train.rollout_stage import prepare_dataset

    loaded = load_model(None, dtype="float32")
    model = get_peft_model(loaded.model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM"))
    handle = apply_wemask(model, CONFIG)
    dataset, _ = load_training_data(PROMPTS, str(ROOT / "data" / "math_problems.jsonl"))
    dataset = prepare_dataset(dataset, loaded.tokenizer, None, [format_reward])

    def trainer(use_vllm: bool):
        args = GRPOConfig(
            output_dir=tmp, per_device_train_batch_size=BATCH, num_generations=BATCH, max_completion_length=COMPLETION_TOKENS,
            learning_rate=1e-5, report_to="none", save_strategy="no", disable_tqdm=True, seed=0, use_vllm=use_vllm,
            vllm_max_model_length=MAX_MODEL_LENGTH, **hardware_defaults(GRPOConfig),
        )
        return GRPOTrainer(model=model, reward_funcs=[format_reward], args=args, train_dataset=dataset,
                           processing_class=loaded.tokenizer)  # fmt: skip

    plain = trainer(False)
    with colocated_engine(loaded.model, torch.float32, masked=True, job=VllmJob(sequences=BATCH, tokens=MAX_MODEL_LENGTH)):
        engine = trainer(True)
    mask_rollouts(engine, handle.config)
    return plain, engine, handle


def stepper(trainer):
    """One timed training step of `trainer` (TRL's training_step and the optimizer step) on a fixed batch."""
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise
    batch = next(iter(trainer.get_train_dataloader()))

    def step() -> tuple[float, float]:
        """(wall, CPU) seconds: CPU time of this process (vLLM runs in it) is steadier on a shared machine."""
        trainer.model.train()
        start, start_cpu = time.perf_counter(), time.process_time()
        trainer.training_step(trainer.model, batch, None)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.state.global_step += 1  # so that TRL syncs the weights into vLLM before the next rollouts
        return time.perf_counter() - start, time.process_time() - start_cpu

    return step


def run() -> dict:
    import tempfile

    gc.collect()  # an engine left by an earlier benchmark must be gone before this one starts
    with tempfile.TemporaryDirectory() as tmp:
        plain, engine, handle = build(tmp)
        step_plain, step_vllm = stepper(plain), stepper(engine)
        if WARM_UP:
            step_plain(), step_vllm()
        generate_s, vllm_s = [], []
        for i in range(REPEATS):
            for use_vllm in ((False, True) if i % 2 == 0 else (True, False)):
                (vllm_s if use_vllm else generate_s).append((step_vllm if use_vllm else step_plain)())
        mismatch = engine._metrics["train"]["sampling/sampling_logp_difference/mean"]  # TRL's, one per step (not logged here)
        handle.remove()
        del plain, engine
        gc.collect()
    return {
        "step s (generate() rollouts)": statistics.median(t[0] for t in generate_s),
        "step s (vLLM rollouts)": statistics.median(t[0] for t in vllm_s),
        "speed-up (generate / vLLM, paired)": statistics.median(g[0] / v[0] for g, v in zip(generate_s, vllm_s)),
        "CPU-time speed-up (paired)": statistics.median(g[1] / v[1] for g, v in zip(generate_s, vllm_s)),
        "vLLM-vs-trainer mean |logp diff| (max over steps)": max(mismatch),
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
