"""Training commands (sft, dpo, grpo) on TRL trainers, all through one shared path: train.common.run()."""
