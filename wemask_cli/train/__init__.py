"""Training commands (sft, dpo, grpo) on TRL trainers, all through one shared path: `train.run.run()`.

options.py (wemask's options) -> recipe.py + resolve.py (defaults < recipe < flags, with provenance) ->
checkpoints.py (the output folder, --resume) -> stage.py (the Stage base; sft.py, dpo.py, grpo.py, each declared
by a torch-free StageSpec found through stages.py) -> install.py and reference.py (interventions on the policy and the
reference model) -> callbacks.py -> records.py (run record, metrics).
"""
