"""Layer 1, plumbing (ranks: tests/test_layers.py).

Output folders and files: claimed before any work, nothing of the user's ever deleted, JSON always strict.

    with claim_output_dir(path, overwrite=..., resume=..., kind="sft") as claim:   # before loading anything
        ...                                                                        # check every input
        claim.clear()                                                              # --overwrite deletes here
        ...; claim.record("metrics.json")                                          # what wemask just wrote

A claimed folder holds a lock `.wemask.lock` while the command runs and a manifest `.wemask-manifest.json` naming
each file wemask wrote there (relative to the folder, with its size and mtime) and each folder it created. A
non-empty folder is refused unless --overwrite (or --resume). --overwrite is checked at the claim (refused, naming
them, while the folder holds anything wemask cannot show it wrote) and deletes later, only the recorded files
still as wemask wrote them, never the folder itself, never through a symlink; another wemask command's folder
inside (its own manifest) is kept. A folder a failed command created is removed again while still empty.
Torch-free.
"""

from wemask_cli.outputs.claim import OutputClaim, claim_on_main, claim_output_dir, read_manifest, record_written
from wemask_cli.outputs.files import atomic_write_json, check_inputs_outside, check_output_file, check_writable, dumps_strict, strict_json
from wemask_cli.outputs.lock import UNREADABLE_LOCK_GRACE_S, running_command
from wemask_cli.outputs.manifest import LOCK_NAME, MANIFEST_NAME, OURS, STAGING_NAME, Manifest
from wemask_cli.outputs.names import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, METRICS_FILE, MODEL_CONFIG_FILE, RUN_RECORD_FILE
from wemask_cli.runtime.atomic import atomic_write_text, describe_os_error

__all__ = [
    "ADAPTER_CONFIG_FILE", "ADAPTER_WEIGHTS_FILE", "LOCK_NAME", "MANIFEST_NAME", "METRICS_FILE", "MODEL_CONFIG_FILE", "OURS", "RUN_RECORD_FILE", "STAGING_NAME",
    "UNREADABLE_LOCK_GRACE_S", "Manifest", "OutputClaim", "atomic_write_json",
    "atomic_write_text", "check_inputs_outside", "check_output_file", "check_writable", "claim_on_main", "claim_output_dir",
    "describe_os_error", "dumps_strict", "read_manifest", "record_written", "running_command", "strict_json",
]
