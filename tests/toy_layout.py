"""A data layout declared outside wemask_cli, found through the `wemask.data_layouts` entry point group
(tests/test_stage_registry.py): question/reply rows, which it converts to prompt/completion for every stage that
reads supervised data (sft, and any plugin stage that reads what sft reads)."""

from __future__ import annotations

from wemask_cli.data import DataFormat
from wemask_cli.data.formats import SUPERVISED
from wemask_cli.data.layouts import LAYOUTS, DataLayout

QUESTION_REPLY = DataFormat("question-reply (toy plugin)", ("prompt", "completion"))


def to_supervised(dataset, labels, where):
    return dataset.rename_columns({"question": "prompt", "reply": "completion"}), QUESTION_REPLY


@LAYOUTS.register
class QuestionReply(DataLayout):
    name = "question-reply"
    feeds = {SUPERVISED.kind: to_supervised}

    @staticmethod
    def recognises(rows: list[dict]) -> bool:
        return bool(rows) and {"question", "reply"} <= set(rows[0])
