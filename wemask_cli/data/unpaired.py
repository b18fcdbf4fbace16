"""Unpaired feedback, what KTO reads (train/kto.py): a prompt, one completion and a boolean label (true: desirable).

UNPAIRED is that kind of TrainingData ("unpaired"); two layouts feed it:
- `prompt`/`completion`/`label` rows, each label checked to be true or false (TRL's KTOTrainer reads it as such);
- preference pairs (`prompt`/`chosen`/`rejected`), unpaired as TRL's `unpair_preference_dataset` does: each pair
  becomes its chosen completion labelled true and its rejected one labelled false.
"""

from __future__ import annotations

from wemask_cli.data.formats import DataFormat, TrainingData, check_rows
from wemask_cli.data.layouts import LAYOUTS, DataLayout
from wemask_cli.runtime.errors import WeMaskError

LABELLED = ("prompt", "completion", "label")
PAIRED = ("prompt", "chosen", "rejected")
UNPAIRED = TrainingData(
    (DataFormat("prompt-completion-label", LABELLED),), "unpaired",
    "a 'label' column of true or false per row (true: the completion is desirable, false: undesirable), or "
    "preference pairs (prompt, chosen, rejected), which it unpairs by itself (chosen: true, rejected: false)",
)
# The label is checked here; check_rows reads the text columns, and keeps the label.
LABELLED_ROWS = DataFormat("prompt-completion-label", ("prompt", "completion"), keep_other_columns=True)
PAIRS = DataFormat("prompt-chosen-rejected", PAIRED)
UNPAIRED_PAIRS = DataFormat("prompt-chosen-rejected, unpaired (chosen: label true, rejected: false)", ("prompt", "completion"),
                            keep_other_columns=True)


def _label(index: int, labels: list[str] | None) -> str:
    return labels[index] if labels else f"row {index + 1}"


def _labelled(dataset, labels: list[str] | None, where: str):
    for index, value in enumerate(dataset["label"]):
        if not isinstance(value, bool):
            raise WeMaskError(
                f"{where} {_label(index, labels)}: 'label' is {value!r}, not true or false (true: the completion is "
                "desirable, false: undesirable)"
            )
    return dataset.select_columns(list(LABELLED)), LABELLED_ROWS


def _unpair(dataset, labels: list[str] | None, where: str):
    """Each pair as two rows; the pairs are checked first, so an error names the pair's own column."""
    from datasets import Dataset

    rows, names = {"prompt": [], "completion": [], "label": []}, []
    pairs = check_rows(dataset.select_columns(list(PAIRED)), PAIRS, labels, where)
    for index, row in enumerate(pairs.to_list()):
        for side, label in (("chosen", True), ("rejected", False)):
            rows["prompt"].append(row["prompt"])
            rows["completion"].append(row[side])
            rows["label"].append(label)
            names.append(f"{_label(index, labels)} ({side})")
    return Dataset.from_dict(rows), UNPAIRED_PAIRS, names


@LAYOUTS.register
class LabelledRows(DataLayout):
    name = "prompt-completion-label"
    feeds = {UNPAIRED.kind: _labelled}

    @staticmethod
    def recognises(rows: list[dict]) -> bool:
        return bool(rows) and set(LABELLED) <= set(rows[0])


@LAYOUTS.register
class PreferencePairs(DataLayout):
    name = "preference pairs"
    feeds = {UNPAIRED.kind: _unpair}

    @staticmethod
    def recognises(rows: list[dict]) -> bool:
        return bool(rows) and set(PAIRED) <= set(rows[0]) and "label" not in rows[0]
