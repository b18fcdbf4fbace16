"""What makes two runs comparable in `wemask report`: every setting that changes a result, read from a run's
metrics.json and, for training runs, the wemask_run.json beside it (train/records.py writes both).

Runs whose settings are equal differ in seed alone: their points are averaged, with the std across them as error
bars. Any other difference makes a separate line, named by the settings that differ between lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..model_names import model_label
from ..outputs import RUN_RECORD_FILE

PLAIN = "plain"  # no mask: drawn as the dashed baseline
# The order in which settings name a line; stage and task split tables and panels, the rest name lines.
KEYS = ("stage", "task", "mode", "peft", "ref_mask", "remedies", "quantize", "model", "data", "eval_data", "mask_setup", "args")
NAMES = {"ref_mask": "ref-mask", "eval_data": "eval data", "mask_setup": "mask"}
# Training arguments that do not change the result (paths, logging, saving, hub, evaluation schedule, seeds).
IGNORED_ARGS = (
    "output_dir", "logging", "log_", "save_", "hub_", "push_to_hub", "report_to", "run_name", "seed", "data_seed",
    "overwrite_output_dir", "resume_from_checkpoint", "dataloader_", "disable_tqdm", "eval_", "per_device_eval",
    "include_", "ddp_", "local_rank", "trackio", "project", "restore_callback_states", "ignore_data_skip",
    "print_", "skip_memory_metrics", "accelerator_config", "prediction_loss_only", "batch_eval_metrics",
)  # fmt: skip
OPTIONS_ELSEWHERE = {
    "model", "output_dir", "config", "dataset", "dataset_split", "dataset_config", "eval_dataset", "eval_split", "mask_rate",
    "mode", "me_layer", "select", "layers", "strength", "use_peft", "lora_r", "load_in_4bit", "load_in_8bit", "overwrite",
    "resume", "ref_mask",
}  # fmt: skip
IGNORED_EVAL_SETTINGS = ("task", "data", "split", "data_config", "batch_size", "seeds")


def read_run_record(metrics_path: Path) -> dict:
    """The wemask_run.json beside a training run's metrics.json ({} when there is none or it is unreadable)."""
    path = metrics_path.parent / RUN_RECORD_FILE
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def data_label(name, sha256=None, *parts) -> str:
    """The data a run read: its file name (or hub name), its config/split, and a short content hash when known."""
    if not name:
        return ""
    text = Path(str(name)).name if "/" in str(name) and Path(str(name)).suffix else str(name)
    text += "".join(f":{part}" for part in parts if part and part != "train")
    return f"{text}#{sha256[:8]}" if sha256 else text


def remedy_kinds(document: dict) -> list[str]:
    """The remedies a run trained with (training metrics) or an eval ran with (re-applied from the model)."""
    if isinstance(document.get("interventions"), list):
        return [str(kind) for kind in document["interventions"]]
    applied = ((document.get("provenance") or {}).get("model") or {}).get("interventions") or []
    return [str(entry.get("kind")) for entry in applied if isinstance(entry, dict) and entry.get("kind") != "wemask"]


def mask_setup(document: dict) -> str:
    """How the mask was placed (ME layer, selection, layers, strength): part of a masked run's settings."""
    parts = [f"{key}={document[key]}" for key in ("me_layer", "select", "layers", "strength") if document.get(key) is not None]
    return " ".join(parts)


def result_args(record: dict) -> dict[str, str]:
    """The TRL training arguments and wemask options that can change the result, as text: IGNORED_ARGS and the
    options held by other settings (OPTIONS_ELSEWHERE) left out."""
    args = {key: value for key, value in (record.get("trl_args") or {}).items() if not key.startswith(IGNORED_ARGS)}
    options = record.get("options") or {}
    args.update({key: value for key, value in options.items() if key not in OPTIONS_ELSEWHERE and value is not None})
    return {key: json.dumps(value, sort_keys=True, default=str) for key, value in args.items()}


def training_settings(document: dict, record: dict) -> dict:
    """A training run's settings (see KEYS); `args` holds its TRL arguments, compared across runs later."""
    options = record.get("options") or {}
    rate = document.get("mask_rate")
    masked = isinstance(rate, (int, float)) and rate > 0
    peft = document.get("peft", options.get("use_peft"))
    quantize = "4bit" if options.get("load_in_4bit") else "8bit" if options.get("load_in_8bit") else "none"
    return {
        "stage": document.get("stage") or "?",
        "task": "",
        "mode": (document.get("mode") or "aware") if masked else PLAIN,
        "model": model_label(document.get("model") or record.get("model_source")),
        "data": data_label(document.get("dataset") or options.get("dataset"), record.get("data_sha256"),
                           options.get("dataset_config"), options.get("dataset_split")),
        "eval_data": data_label(options.get("eval_dataset")),
        "peft": (f"LoRA r={options['lora_r']}" if options.get("lora_r") else "LoRA") if peft else "full",
        "ref_mask": str(document.get("ref_mask") or options.get("ref_mask") or ""),
        "remedies": " + ".join(remedy_kinds(document)),
        "quantize": quantize,
        "mask_setup": mask_setup(document) if masked else "",
        "args": result_args(record),
    }  # fmt: skip


def eval_settings(document: dict, mode: str, quantize: str, me_layer=None) -> dict:
    """An eval run's settings for the results of one mode, quantization and ME layer (see KEYS)."""
    prov = document.get("provenance") or {}
    data = prov.get("data") or {}
    settings = document.get("settings") or {}
    return {
        "stage": document.get("stage") or "eval",
        "task": document.get("task") or "",
        "mode": mode,
        "model": model_label(document.get("model") or (prov.get("model") or {}).get("path")),
        "data": data_label(data.get("path") or data.get("source") or document.get("data"), data.get("sha256"),
                           settings.get("data_config"), settings.get("split")),
        "eval_data": "",
        "peft": "",
        "ref_mask": "",
        "remedies": " + ".join(remedy_kinds(document)),
        "quantize": quantize,
        "mask_setup": "" if mode == PLAIN or me_layer is None else f"me_layer={me_layer}",
        "args": {k: json.dumps(v, default=str) for k, v in settings.items() if k not in IGNORED_EVAL_SETTINGS},
    }  # fmt: skip


def differing_args(settings: list[dict]) -> set[str]:
    """The argument names whose values are not the same in every one of these runs' settings."""
    names = {name for s in settings for name in s["args"]}
    return {name for name in names if len({s["args"].get(name) for s in settings}) > 1}


def setting_key(settings: dict, args: set[str]) -> tuple:
    """What must be equal for two runs to be averaged: every setting and the differing arguments."""
    return tuple(settings[k] for k in KEYS if k != "args") + tuple(settings["args"].get(a) for a in sorted(args))


def line_names(all_settings: list[dict]) -> list[str]:
    """A name per run's settings: the mode, then each other setting that differs between the runs of one stage
    (and task), e.g. 'aware · LoRA r=16 · ref-mask none · data hh.jsonl'."""
    args = differing_args(all_settings)
    groups: dict[tuple, list[dict]] = {}
    for settings in all_settings:
        groups.setdefault((settings["stage"], settings["task"]), []).append(settings)
    names = []
    for settings in all_settings:
        peers = groups[(settings["stage"], settings["task"])]
        parts = [settings["mode"]]
        for key in KEYS[3:-1]:
            values = {peer[key] for peer in peers if key != "mask_setup" or peer["mode"] != PLAIN}
            if len(values) > 1 or (key in ("remedies",) and settings[key]) or (key == "quantize" and settings[key] != "none"):
                parts.append(describe(key, settings[key]))
        for arg in sorted(a for a in args if len({peer["args"].get(a) for peer in peers}) > 1):
            parts.append(f"{arg}={settings['args'].get(arg, '-')}")
        names.append(" · ".join(part for part in parts if part))
    return names


def describe(key: str, value: str) -> str:
    """One setting as a line names it ('full' and 'LoRA r=16' alone; 'ref-mask same'; 'model X')."""
    if key in ("peft", "remedies", "quantize") or not value:
        return "no remedy" if key == "remedies" and not value else ("no quantization" if value == "none" else value)
    return f"{NAMES.get(key, key)} {value}"
