"""Layer 4, a command family's machinery (ranks: tests/test_layers.py).

Training commands (sft, dpo, grpo, kto, rloo, a plugin's) on TRL trainers, all through one shared path:
`train.run.run()`, which commands/train.py calls.

options.py (wemask's options) -> recipe.py + resolve.py (defaults < recipe < flags, with provenance) ->
checkpoints.py (the output folder, --resume) -> stage_base.py (the Stage base; sft.py, dpo.py, grpo.py, kto.py,
rloo.py, each declared by a torch-free StageSpec registered in stage_registry.py's STAGES) -> install.py and reference.py
(interventions on the policy and the reference model) -> callbacks.py -> records.py (run record, metrics).
"""
