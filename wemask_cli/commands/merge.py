"""`wemask merge RUN -o DIR`: a LoRA training run merged into a full model folder, with its saved mask and
interventions, which `wemask infer/eval --engine vllm` and `vllm serve` load as any model folder.

The adapter's weights are added into the base model's (PEFT's merge_and_unload), saved as safetensors with the
tokenizer (its chat template included); the run's interventions.json, interventions.safetensors and
wemask_config.json are copied beside them, so wemask re-applies the same mask and remedies from DIR.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from wemask_cli.outputs import ADAPTER_CONFIG_FILE, METRICS_FILE, RUN_RECORD_FILE, claim_output_dir, running_command
from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.progress import status

CARRIED = ("interventions.json", "interventions.safetensors", "wemask_config.json", RUN_RECORD_FILE, METRICS_FILE)


def run_merge(run: str, output: Path, overwrite: bool = False, dtype: str = "auto") -> list[Path]:
    """Merge the LoRA run in `run` into `output` (claimed: new, or --overwrite); returns the files written."""
    folder = Path(run).expanduser()
    if not folder.is_dir():
        raise WeMaskError(f"{run}: no such run folder: give the output folder of a `wemask sft|dpo|grpo --use-peft` run")
    running = running_command(folder)
    if running:
        raise WeMaskError(
            f"{run} is in use by {running}: a LoRA run's adapter is saved when its training ends; wait for it to "
            f"finish, or merge one of its checkpoints ({run}/checkpoint-N)"
        )
    if not (folder / ADAPTER_CONFIG_FILE).is_file():
        raise WeMaskError(
            f"{run} has no {ADAPTER_CONFIG_FILE}: it is not a LoRA run, and a full fine-tuning run is a model folder "
            "already (give it to --model as it is)"
        )
    output = Path(output).expanduser()
    if folder.resolve().is_relative_to(output.resolve()):
        raise WeMaskError(f"--output {output} is the run {run} or holds it: write the merged model to another folder")
    with claim_output_dir(output, overwrite=overwrite, kind="merge", flag="--output") as claim:
        from wemask_cli.models.loading import load_model

        with status(f"Loading {run} (base model and adapter)..."):
            loaded = load_model(str(folder), dtype=dtype, interventions=False)  # the remedies travel as files
        with status("Merging the adapter into the base weights..."):
            merged = loaded.model.merge_and_unload()
        claim.clear()
        merged.save_pretrained(output, safe_serialization=True)
        loaded.tokenizer.save_pretrained(output)
        for name in CARRIED:
            if (folder / name).is_file():
                shutil.copy2(folder / name, output / name)
        written = sorted(path for path in output.iterdir() if path.is_file() and not path.name.startswith("."))
        claim.record(*(path.relative_to(output) for path in written))
    return written
