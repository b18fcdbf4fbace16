"""What makes two runs comparable in `wemask report`: every setting that changes a result, read from a run's
metrics.json and, for training runs, the wemask_run.json beside it (train/records.py writes both). An eval of a
training run is keyed by that run's training setting (recorded in the eval's provenance), not by its folder.

A line is one setting over the mask rate: the runs without a mask (r = 0) are the plain baseline, the r = 0 point of
every line whose other settings they share. Runs of one setting at one rate differ in seed alone: they are averaged
(commands/report.py). Lines are named like a paper's legend, by the mode and the settings that differ between them:
'aware, LoRA r=16, GatedNorm both'.
"""

from __future__ import annotations

import json
from pathlib import Path

from wemask_cli.interventions.wemask import WeMask
from wemask_cli.models.names import model_label
from wemask_cli.outputs import RUN_RECORD_FILE
from wemask_cli.outputs.trained import PLAIN, mode_at

# The order in which settings name a line; stage and task split tables and panels, the rest name lines.
KEYS = ("stage", "task", "mode", "training", "peft", "ref_mask", "remedies", "quantize", "model", "train_data", "data",
        "eval_data", "mask_setup", "args")  # fmt: skip
NAMES = {"ref_mask": "ref-mask", "eval_data": "eval data", "train_data": "trained on", "mask_setup": "mask"}
SHOWN_ALONE = ("peft", "remedies", "quantize", "training")  # named by their value alone ('LoRA r=16', 'GatedNorm both')
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
    "resume", "ref_mask", "verbose", "datasets", "test_split_size",
}  # fmt: skip
IGNORED_EVAL_SETTINGS = ("task", "data", "split", "data_config", "batch_size", "seeds")


def read_run_record(metrics_path: Path) -> dict:
    """The wemask_run.json beside a training run's metrics.json ({} when there is none or it is unreadable)."""
    from wemask_cli.outputs.trained import read_object

    return read_object(metrics_path.parent / RUN_RECORD_FILE)


def data_label(name, sha256=None, *parts) -> str:
    """The data a run read: its file name (or hub name), its config/split, and a short content hash when known."""
    if not name:
        return ""
    if " + " in str(name):  # a `datasets:` mixture
        return " + ".join(data_label(part) for part in str(name).split(" + ")) + (f"#{sha256[:8]}" if sha256 else "")
    text = Path(str(name)).name if "/" in str(name) and Path(str(name)).suffix else str(name)
    text += "".join(f":{part}" for part in parts if part and part != "train")
    return f"{text}#{sha256[:8]}" if sha256 else text


def remedy_label(kind: str, options: dict) -> str:
    """A remedy as a legend names it: its title, its main flag's value and any other flag given ('GatedNorm both')."""
    from wemask_cli.interventions.registry import kinds

    cls = kinds().get(kind)
    if cls is None:
        return kind
    words = [cls.title or kind]
    for spec in cls.flags():
        value = options.get(spec.dest)
        if value in (None, False, True) or str(value) == str(spec.default):
            continue
        main = spec.name == cls.flag_name()
        words.append(str(value) if main else f"{spec.dest.removeprefix(kind + '_')}={value}")
    return " ".join(words)


def remedy_kinds(document: dict) -> list[str]:
    """The remedies a run trained with (training metrics) or an eval ran with (re-applied from the model)."""
    if isinstance(document.get("interventions"), list):
        return [str(kind) for kind in document["interventions"]]
    applied = ((document.get("provenance") or {}).get("model") or {}).get("interventions") or []
    return [str(entry.get("kind")) for entry in applied if isinstance(entry, dict) and entry.get("kind") != WeMask.kind]


def mask_setup(document: dict) -> str:
    """How the mask was placed (ME layer, selection, layers, strength): part of a masked run's settings."""
    parts = [f"{key}={document[key]}" for key in ("me_layer", "select", "layers", "strength") if document.get(key) is not None]
    return " ".join(parts)


def result_args(record: dict, remedies: list[str] = ()) -> dict[str, str]:
    """The TRL training arguments and wemask options that can change the result, as text: IGNORED_ARGS, the options
    held by other settings (OPTIONS_ELSEWHERE) and the remedies' own flags (in their label) left out."""
    args = {key: value for key, value in (record.get("trl_args") or {}).items() if not key.startswith(IGNORED_ARGS)}
    options = record.get("options") or {}
    mine = tuple(remedies)
    args.update({key: value for key, value in options.items()
                 if key not in OPTIONS_ELSEWHERE and value is not None and not (mine and key.startswith(mine))})  # fmt: skip
    return {key: json.dumps(value, sort_keys=True, default=str) for key, value in args.items()}


def is_masked(rate) -> bool:
    return isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0


def training_settings(document: dict, record: dict) -> dict:
    """A training run's settings (see KEYS); `args` holds its TRL arguments, compared across runs later."""
    options = record.get("options") or {}
    masked = is_masked(document.get("mask_rate"))
    peft = document.get("peft", options.get("use_peft"))
    quantize = "4bit" if options.get("load_in_4bit") else "8bit" if options.get("load_in_8bit") else "none"
    remedies = remedy_kinds(document)
    return {
        "stage": document.get("stage") or "?",
        "task": "",
        "mode": (document.get("mode") or "aware") if masked else PLAIN,
        "training": "",
        "model": model_label(document.get("model") or record.get("model_source")),
        "train_data": "",
        "data": data_label(document.get("dataset") or options.get("dataset"), record.get("data_sha256"),
                           options.get("dataset_config"), options.get("dataset_split")),
        "eval_data": data_label(options.get("eval_dataset")),
        "peft": (f"LoRA r={options['lora_r']}" if options.get("lora_r") else "LoRA") if peft else "full",
        "ref_mask": str(document.get("ref_mask") or options.get("ref_mask") or ""),
        "remedies": ", ".join(remedy_label(kind, options) for kind in remedies),
        "quantize": quantize,
        "mask_setup": mask_setup(document) if masked else "",
        "args": result_args(record, remedies),
        "masked": masked,
        "seed": document.get("seed", record.get("seed")),
    }  # fmt: skip


def eval_settings(document: dict, rate, quantize: str, me_layer=None) -> dict:
    """An eval run's settings for the results at one rate, quantization and ME layer (see KEYS). An eval of a
    wemask training run takes that run's setting; its mode is blank on a model that nothing trained."""
    prov = document.get("provenance") or {}
    data = prov.get("data") or {}
    settings = document.get("settings") or {}
    masked = is_masked(rate)
    found = {
        "stage": document.get("stage") or "eval", "task": document.get("task") or "", "mode": "" if masked else PLAIN,
        "training": "", "model": model_label(document.get("model") or (prov.get("model") or {}).get("path")),
        "train_data": "", "eval_data": "", "peft": "", "ref_mask": "",
        "data": data_label(data.get("path") or data.get("source") or document.get("data"), data.get("sha256"),
                           settings.get("data_config"), settings.get("split")),
        "remedies": ", ".join(remedy_label(kind, {}) for kind in remedy_kinds(document)),
        "quantize": quantize,
        "mask_setup": "" if not masked or me_layer is None else f"me_layer={me_layer}",
        "args": {k: json.dumps(v, default=str) for k, v in settings.items() if k not in IGNORED_EVAL_SETTINGS},
        "masked": masked, "seed": None,
    }  # fmt: skip
    trained = (prov.get("model") or {}).get("trained")
    if isinstance(trained, dict) and isinstance(trained.get("metrics"), dict):
        found.update(as_trained(trained, rate, found))
    return found


def as_trained(trained: dict, rate, found: dict) -> dict:
    """The settings an eval of a training run takes from it: the training stage, LoRA, remedies, base model, data,
    arguments and seed; its mode is the training's at the rate it trained with, 'free' at any other rate."""
    metrics, record = trained["metrics"], trained.get("record") or {}
    run = training_settings(metrics, record)
    trained_rate = metrics.get("mask_rate") if is_masked(metrics.get("mask_rate")) else 0.0
    setup = found["mask_setup"]
    if is_masked(rate) and trained_rate and rate != trained_rate and run["mode"] == "aware":
        setup = f"{setup} trained r={trained_rate:g}".strip()
    args = {**{f"train {k}": v for k, v in run["args"].items()}, **found["args"]}
    return {"mode": mode_at(rate, metrics), "training": run["stage"], "peft": run["peft"], "mask_setup": setup,
            "remedies": run["remedies"] or found["remedies"], "model": run["model"], "train_data": run["data"],
            "quantize": found["quantize"] if found["quantize"] != "none" else run["quantize"], "args": args, "seed": run["seed"]}  # fmt: skip


def differing_args(settings: list[dict]) -> set[str]:
    """The argument names whose values are not the same in every one of these runs' settings."""
    names = {name for s in settings for name in s["args"]}
    return {name for name in names if len({s["args"].get(name) for s in settings}) > 1}


def curve_key(settings: dict, args: set[str]) -> tuple:
    """What a line shares with its r = 0 baseline: every setting but the mode and the mask's placement."""
    return tuple(settings[k] for k in KEYS if k not in ("mode", "mask_setup", "args")) + tuple(
        settings["args"].get(a) for a in sorted(args)
    )


def line_keys(all_settings: list[dict]) -> list[list[tuple]]:
    """For each run's settings, the lines it belongs to, as (curve key, mode, mask placement): a masked run to its
    own; a run without a mask to every masked line with its curve key (their r = 0 point), else to a plain line."""
    args = differing_args(all_settings)
    masked: dict[tuple, dict] = {}
    for settings in all_settings:
        if settings["masked"]:
            masked.setdefault(curve_key(settings, args), {})[(settings["mode"], settings["mask_setup"])] = None
    keys = []
    for settings in all_settings:
        curve = curve_key(settings, args)
        if settings["masked"]:
            keys.append([(curve, settings["mode"], settings["mask_setup"])])
        else:
            keys.append([(curve, mode, setup) for mode, setup in masked.get(curve, {})] or [(curve, settings["mode"], "")])
    return keys


def line_names(all_settings: list[dict], rates: list) -> list[list[str]]:
    """A legend name per line of each run's settings (see `line_keys`): the mode, then each setting that differs
    between the lines of one stage (and task), e.g. 'aware, LoRA r=16, ref-mask none, data hh.jsonl'; a line of a
    single masked rate names it ('aware r=0.3')."""
    keys = line_keys(all_settings)
    args = differing_args(all_settings)
    lines: dict[tuple, dict] = {}  # (stage, task, line key) -> the settings of a run on it, its rates
    for settings, found, rate in zip(all_settings, keys, rates):
        for key in found:
            line = lines.setdefault((settings["stage"], settings["task"], key), {"settings": settings, "rates": set()})
            line["rates"].add(rate)
            if settings["masked"]:
                line["settings"] = settings
    names = {}
    for (stage, task, key), line in lines.items():
        peers = [other["settings"] for (s, t, _), other in lines.items() if (s, t) == (stage, task)]
        names[(stage, task, key)] = line_name(line["settings"], peers, args, line["rates"])
    return [[names[(s["stage"], s["task"], key)] for key in found] for s, found in zip(all_settings, keys)]


def line_name(settings: dict, peers: list[dict], args: set[str], rates: set) -> str:
    """One line's legend name among its peers (the lines of its stage and task)."""
    mode = settings["mode"]
    masked_rates = sorted(rate for rate in rates if is_masked(rate))
    if mode and mode != PLAIN and len(rates) == 1 and masked_rates:
        mode = f"{mode} r={masked_rates[0]:g}"
    parts = [mode]
    for key in KEYS[3:-1]:
        values = {peer[key] for peer in peers if key != "mask_setup" or peer["masked"]}
        if len(values) > 1 or (key == "remedies" and settings[key]) or (key == "quantize" and settings[key] != "none"):
            parts.append(describe(key, settings[key]))
    for arg in sorted(a for a in args if len({peer["args"][a] for peer in peers if a in peer["args"]}) > 1):  # set apart
        parts.append(f"{arg}={settings['args'].get(arg, '-')}")
    known = settings["model"] if settings["model"] not in ("", "?") else ("base model" if masked_rates else PLAIN)
    return ", ".join(part for part in parts if part) or known


def describe(key: str, value: str) -> str:
    """One setting as a line names it ('full', 'LoRA r=16', 'GatedNorm both' alone; 'ref-mask same'; 'model X')."""
    if key == "quantize":
        return "" if value == "none" else value
    if key in SHOWN_ALONE or not value:
        return value or ("no remedy" if key == "remedies" else "")
    return f"{NAMES.get(key, key)} {value}"
