"""`wemask rloo`: TRL's RLOOTrainer (REINFORCE Leave-One-Out) through the shared training run (run.py).

RLOO generates and scores its completions as GRPO does, so it shares GRPO's rewards, prompts data, rollouts
(transformers or TRL's vLLM) and mask placement (rollout_stage.py); its advantage is each completion's reward minus
the mean of the other completions of its prompt. TRL's RLOO has a reference model by default (`--beta` 0.05: a KL
penalty in the reward): in aware mode it computes with the policy's mask, so the first step's KL is 0.
"""

from __future__ import annotations

from wemask_cli.data.formats import PROMPTS
from wemask_cli.train.reference import masked_layers_record, reference_kind
from wemask_cli.train.rollout_stage import ROLLOUT_FLAGS, RolloutStage, reward_metrics
from wemask_cli.train.stage_registry import STAGES, StageSpec

FIRST_STEP_KEYS = ("loss", "reward", "reward_std", "kl", "entropy")
STAGE = STAGES.register(StageSpec(
    "rloo",
    """REINFORCE Leave-One-Out with TRL's RLOOTrainer and WeMask (data: prompt [+ answer] | GSM8K question/answer as is).

    Rewards, data and rollouts as in grpo: aware: rollouts are generated with the mask, and the loss, old-policy and
    reference passes use it on the same first real token (the reference is masked like the policy, so the first
    step's KL is 0); free: plain RLOO, the mask recorded for inference. --use-vllm: TRL's in-process vLLM engine
    generates, with the same mask in aware mode. Outputs as in grpo, and metrics.json adds the reference, the masked
    layers and the first step. TRL's RLOO options pass through: --num-generations, --max-completion-length, --beta,
    --normalize-advantages, --reward-clip-range, --use-vllm, ...
    """,
    "wemask_cli.train.rloo:RLOOStage",
    "trl:RLOOConfig",
    PROMPTS.named("rloo"),
    flags=ROLLOUT_FLAGS,
    reference="same",
))


class RLOOStage(RolloutStage):
    spec = STAGE

    def trainer_class(self) -> type:
        from trl import RLOOTrainer

        return RLOOTrainer

    def extra_metrics(self, trainer) -> dict:
        """GRPO's reward summaries, plus the reference (none with --beta 0), the layers WeMask hooks on the policy
        and on a separate reference, and the first logged step (its KL is 0 with a reference masked like the policy)."""
        first = next((entry for entry in trainer.state.log_history if "reward" in entry), {})
        return {
            **reward_metrics(trainer),
            "reference": reference_kind(trainer),
            "masked_layers": masked_layers_record(trainer),
            "first_step": {key: first[key] for key in FIRST_STEP_KEYS if key in first},
        }
