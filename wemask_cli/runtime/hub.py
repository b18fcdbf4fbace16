"""The Hugging Face Hub, reached or not: one quick check before anything is fetched from it.

Without it, an unreachable hub costs a minute of retries (five HEAD requests with growing back-off) before the
real message. With HF_HUB_OFFLINE=1 set, or when one TCP connection to the hub fails within a few seconds, the
process goes offline (cached copies only, as HF_HUB_OFFLINE=1 does) and says so once; a copy that is not cached
then fails at once. Importing this module imports neither torch nor the hub libraries.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from wemask_cli.compat import datasets, huggingface_hub  # their offline switches (wemask_cli/compat/)
from wemask_cli.runtime import progress

CHECK_SECONDS = 3.0
TRUE = {"1", "true", "yes", "on"}


def offline_requested() -> bool:
    """HF_HUB_OFFLINE (or the older TRANSFORMERS_OFFLINE) is set to a true value."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in TRUE


@functools.cache
def hub_reachable() -> bool:
    """One TCP connection to the hub's endpoint (HF_ENDPOINT, default huggingface.co), within CHECK_SECONDS."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=CHECK_SECONDS).close()
    except OSError:
        return False
    return True


def before_hub_fetch(what: str) -> None:
    """Call before `what` (e.g. "--model org/name") is fetched from the hub: go offline when the hub is out of reach."""
    if offline_requested():
        return
    if hub_reachable():
        return
    go_offline()
    progress.warn(f"{what}: the Hugging Face Hub is not reachable, so only cached copies are used (as with HF_HUB_OFFLINE=1)")


def offline_without_copy(what: str, repo_id: str, repo_type: str = "model") -> bool:
    """True when `repo_id` would be fetched (`what` names it) with the hub offline (HF_HUB_OFFLINE=1, or out of reach:
    then the process goes offline, as `before_hub_fetch` does) and the hub cache holds no snapshot of it."""
    before_hub_fetch(what)
    return offline_requested() and not hub_cache_holds(repo_id, repo_type)


def hub_cache_holds(repo_id: str, repo_type: str = "model") -> bool:
    """A snapshot of the hub repository `repo_id` in the hub cache (its documented layout:
    TYPEs--ORG--NAME/snapshots/COMMIT/), read without importing more of huggingface_hub than its constants."""
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def snapshot_revision(source: str) -> str | None:
    """The commit of the cached hub snapshot a hub id `source` loads from (the cache's documented layout,
    snapshots/COMMIT/, read with huggingface_hub's public `try_to_load_from_cache`); None for a local folder or a
    model not in the cache. transformers 5 no longer records it on the config (`_commit_hash` is gone)."""
    if Path(source).expanduser().exists():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(source, "config.json")
    except ValueError:  # not a valid hub id (huggingface_hub's HFValidationError)
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def go_offline() -> None:
    """HF_HUB_OFFLINE=1 for this process, also in the hub libraries already imported (they read it at import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    huggingface_hub.go_offline()
    datasets.go_offline()
