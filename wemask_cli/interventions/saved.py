"""The saved-run format: interventions.json (the list of configs) + interventions.safetensors (their weights).

    interventions.json  {"format": "wemask-interventions", "version": 1,
                         "interventions": [{"kind": "wemask", ...}, {"kind": "gated_norm", ...}],
                         "weights": "interventions.safetensors" | null}
    interventions.safetensors   tensors named "<kind>.<local name>", e.g. "gated_norm.3.attn.up"

Safetensors only, never pickle. Every file is written to a temporary file and moved into place with
os.replace, weights first, so a reader never sees a list whose weights are missing. A WeMask entry also
writes the legacy wemask_config.json for older readers; a folder holding only a wemask_config.json still
loads (as a run with one WeMask entry). Torch is imported only to read or write weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli.interventions.base import Intervention, InterventionConfigError
from wemask_cli.interventions.registry import config_from_dict
from wemask_cli.interventions.wemask import WeMask
from wemask_cli.method.config import CONFIG_NAME, WeMaskConfig, attach_vectors
from wemask_cli.runtime.atomic import atomic_write, atomic_write_text

INTERVENTIONS_FILE = "interventions.json"
WEIGHTS_FILE = "interventions.safetensors"
FORMAT = "wemask-interventions"
VERSION = 1


@dataclass
class SavedRun:
    """What a run folder carries: the intervention configs (install order) and their weights ({} when none)."""

    configs: list[Intervention]
    weights: dict = field(default_factory=dict, repr=False)
    source: str = INTERVENTIONS_FILE  # or CONFIG_NAME for a legacy folder

    @property
    def wemask(self) -> WeMaskConfig | None:
        """The saved WeMaskConfig, if the run has one."""
        return next((c.config for c in self.configs if isinstance(c, WeMask)), None)

    @property
    def remedies(self) -> list[Intervention]:
        """The saved interventions other than WeMask."""
        return [c for c in self.configs if not isinstance(c, WeMask)]

    def install(self, model, *, active=None, include_wemask: bool = True):
        """install_all() these configs with their weights; `include_wemask=False` leaves WeMask to the caller."""
        from wemask_cli.interventions.installation import install_all

        configs = self.configs if include_wemask else self.remedies
        return install_all(model, configs, weights=self.weights, active=active)


def _write_weights(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    cpu = {name: value.detach().to("cpu").contiguous().clone() for name, value in tensors.items()}
    atomic_write(path, lambda temporary: save_file(cpu, temporary, metadata={"format": "pt", "written_by": "wemask"}))


def save_configs(directory: str | Path, configs: list[Intervention], weights: dict | None = None) -> list[Path]:
    """Write the run's interventions (and weights, when any) into `directory`; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    if weights:
        _write_weights(directory / WEIGHTS_FILE, weights)
        written.append(directory / WEIGHTS_FILE)
    record = {
        "format": FORMAT,
        "version": VERSION,
        "interventions": [config.to_dict() for config in configs],
        "weights": WEIGHTS_FILE if weights else None,
    }
    atomic_write_text(directory / INTERVENTIONS_FILE, json.dumps(record, indent=2) + "\n")
    written.append(directory / INTERVENTIONS_FILE)
    wemask = next((c.config for c in configs if isinstance(c, WeMask)), None)
    if wemask is not None:
        written.append(wemask.save(directory))
    return written


def save_interventions(directory: str | Path, installation) -> list[Path]:
    """Save an Installation (its resolved configs and current weights) into `directory`; returns the paths."""
    return save_configs(directory, installation.configs, installation.state_dict())


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InterventionConfigError(f"{path} is not valid JSON ({err}): fix or delete it") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("interventions"), list):
        raise InterventionConfigError(f"{path} is not a wemask interventions file (no '{FORMAT}' list): fix or delete it")
    if record.get("version") != VERSION:
        raise InterventionConfigError(
            f"{path} has version {record.get('version')!r}; this wemask reads version {VERSION}: upgrade wemask"
        )
    return record


def _read_weights(path: Path) -> dict:
    """The weights file's tensors; missing, unreadable or holding NaN/infinity: one line."""
    if not path.is_file():
        raise InterventionConfigError(f"{path} is missing: the run's intervention weights cannot be restored")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from wemask_cli.runtime.finite import require_finite

    try:
        weights = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise InterventionConfigError(f"{path} cannot be read ({err}): the run's intervention weights are damaged") from None
    require_finite(weights, str(path), InterventionConfigError)
    return weights


def _weights_name(name, path: Path) -> str:
    """interventions.json's "weights": a file name in the same folder, never a path out of it."""
    if not isinstance(name, str) or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise InterventionConfigError(
            f"{path}: \"weights\" is {name!r}, not a file name in its folder (such as {WEIGHTS_FILE!r}): fix or delete it"
        )
    return name


def check_wemask_agrees(directory: str | Path, config: WeMaskConfig | None) -> None:
    """A folder's wemask_config.json (written for older readers) must say what its interventions.json says about
    WeMask (`config`; None: no WeMask entry), else one line naming both files and what differs. Every engine calls
    this, through load_saved or directly."""
    legacy = Path(directory) / CONFIG_NAME
    if not legacy.is_file():
        return
    theirs, ours = WeMaskConfig.load(directory).to_dict(), ({} if config is None else config.to_dict())
    if theirs == ours:
        return
    differ = [f"{key} {theirs[key]!r}" + (f" vs {ours[key]!r}" if key in ours else "") for key in theirs if theirs[key] != ours.get(key)]
    said = "; ".join(differ[:3]) if ours else "it has a mask, interventions.json none"
    raise InterventionConfigError(
        f"{legacy} and {INTERVENTIONS_FILE} beside it disagree about WeMask ({said}): the folder was edited by hand; "
        f"make them agree, or delete {CONFIG_NAME} (interventions.json is the one wemask reads)"
    )


def load_saved(directory: str | Path) -> SavedRun | None:
    """The interventions a run folder carries: interventions.json (+ weights), else a legacy wemask_config.json
    (one WeMask entry), else None."""
    directory = Path(directory)
    path = directory / INTERVENTIONS_FILE
    if path.is_file():
        record = _read_record(path)
        try:
            configs = [config_from_dict(entry) for entry in record["interventions"]]
        except InterventionConfigError as err:
            raise InterventionConfigError(f"{path}: {err}") from None
        kinds = [c.kind for c in configs]
        if len(set(kinds)) != len(kinds):
            raise InterventionConfigError(f"{path} lists a kind twice ({kinds}): one entry per kind")
        weights = _read_weights(directory / _weights_name(record["weights"], path)) if record.get("weights") else {}
        if any(c.has_parameters for c in configs) and not weights:
            raise InterventionConfigError(f"{path} lists interventions with parameters but no weights file")
        saved = SavedRun(configs, weights, INTERVENTIONS_FILE)
        check_wemask_agrees(directory, saved.wemask)
        if saved.wemask is not None:
            attach_vectors(saved.wemask, directory)  # select='direction': its saved vectors
        return saved
    if (directory / CONFIG_NAME).is_file():
        from wemask_cli.interventions.wemask import WeMask

        return SavedRun([WeMask(WeMaskConfig.load(directory))], {}, CONFIG_NAME)
    return None
