"""An eval whose training run was replaced after it (`wemask sft --overwrite` keeps an eval/ folder inside the run,
another command's output): `wemask report` leaves it out with one line, rather than show it beside the new run."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from wemask_cli.outputs.names import RUN_RECORD_FILE
from wemask_cli.outputs.trained import read_object

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"  # eval/document.py's and train/records.py's `started`


def _time(text) -> datetime | None:
    try:
        return datetime.strptime(str(text), TIME_FORMAT)
    except ValueError:
        return None


def written_after(record: Path, metrics: Path) -> bool:
    """The run record was written after the eval's metrics.json (file times, finer than the records' seconds): the
    run was saved again after the eval ended."""
    try:
        return record.stat().st_mtime_ns > metrics.stat().st_mtime_ns
    except OSError:
        return False


def replaced_run_note(document: dict, path: Path) -> str | None:
    """Why the eval in `path` (its metrics.json `document`) measured an earlier run than the one now in the folder it
    evaluated (the model folder it names, or the run folder it sits in): that run started after the eval did; else None."""
    provenance = document.get("provenance") if isinstance(document.get("provenance"), dict) else {}
    model = (provenance.get("model") or {}).get("path") if isinstance(provenance.get("model"), dict) else None
    evaluated = _time(provenance.get("started"))
    if not model or evaluated is None:
        return None
    folders = [Path(str(model)).expanduser()] + ([path.parent.parent] if path.parent.parent.name == Path(str(model)).name else [])
    for folder in folders:
        trained = _time(read_object(folder / RUN_RECORD_FILE).get("started"))
        if trained is not None and (trained > evaluated or written_after(folder / RUN_RECORD_FILE, path)):
            return (f"leaving out {path}: it evaluated an earlier run in {folder} (the run there started {trained:%Y-%m-%d %H:%M:%S}, "
                    f"after this eval's {evaluated:%Y-%m-%d %H:%M:%S}); evaluate the new run again")
    return None
