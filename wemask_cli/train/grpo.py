"""`wemask grpo`: TRL's GRPOTrainer through the shared training run (run.py).

GRPO both generates and trains, so WeMask must act in both, on the same tokens: the rewards, the prompts data, the
rollouts (transformers or TRL's vLLM) and the mask on policy and reference are what it shares with `wemask rloo`
(rollout_stage.py). TRL builds a reference model only with `--beta` above 0 (GRPO's default is 0).
"""

from __future__ import annotations

from wemask_cli.data.formats import PROMPTS
from wemask_cli.train.rollout_stage import ROLLOUT_FLAGS, RolloutStage
from wemask_cli.train.stage_registry import STAGES, StageSpec

STAGE = STAGES.register(StageSpec(
    "grpo",
    """GRPO with TRL's GRPOTrainer and WeMask (data: prompt [+ answer] | GSM8K question/answer as is).

    aware: rollouts are generated with the mask and the loss passes use it on the same first real token;
    free: plain GRPO, the mask recorded for inference. --use-vllm: TRL's in-process vLLM engine generates,
    with the same mask in aware mode (--vllm-mode server: GPUs only). Rename columns with --dataset-columns
    prompt=X,answer=Y. TRL's GRPO options pass through:
    --num-generations, --max-completion-length, --temperature, --beta, --use-vllm, ...
    """,
    "wemask_cli.train.grpo:GRPOStage",
    "trl:GRPOConfig",
    PROMPTS,
    flags=ROLLOUT_FLAGS,
    reference="same",
))


class GRPOStage(RolloutStage):
    spec = STAGE

    def trainer_class(self) -> type:
        from trl import GRPOTrainer

        return GRPOTrainer
