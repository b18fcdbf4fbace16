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
from wemask_cli.runtime.atomic import describe_os_error, write_error, write_remedy
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
        staged = claim.staging("merge")  # only what the save writes is recorded, whatever else the folder gets meanwhile
        save_merged(merged, loaded.tokenizer, folder, staged, output)
        written = claim.move_all_in(staged)  # --overwrite deletes the previous output here, once the new one is written
    return sorted(written)


def save_merged(merged, tokenizer, run: Path, staged: Path, output: Path) -> None:
    """The merged model, its tokenizer and the run's CARRIED files into `staged`; a full disk or a file-size limit is
    one line (safetensors and torch wrap the OS error)."""
    from safetensors import SafetensorError

    try:
        merged.save_pretrained(staged, safe_serialization=True)
        tokenizer.save_pretrained(staged)
        for name in CARRIED:
            if (run / name).is_file():
                shutil.copy2(run / name, staged / name)
    except (OSError, RuntimeError, SafetensorError) as err:
        cause = write_error(err)
        if cause is None:
            raise
        raise WeMaskError(f"could not write the merged model to {output}: {describe_os_error(cause)}; {write_remedy(cause)} and "
                          f"merge again (nothing in {output} was deleted)") from None
