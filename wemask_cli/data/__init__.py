"""Layer 2, core (ranks: tests/test_layers.py).

Datasets for training and evaluation: local files, folders or hub names, nested columns, formats, clear errors.

- readers.py   files (.jsonl/.json/.parquet/.csv, plain text of any name) and hub datasets
- folders.py   a save_to_disk folder or a folder of data files (a hub snapshot)
- local.py     a local file or folder, whichever it is
- columns.py   dotted paths into nested records, --dataset-columns
- formats.py   the layouts a stage accepts (TrainingData; the built-in stages'), detection, per-row checks
- layouts.py   DataLayout and LAYOUTS, the registry of the layouts recognised without flags, by the kind they feed
- verl.py      verl's RL layout
- chat_layouts.py  Alpaca and ShareGPT (LLaMA-Factory, axolotl)
- unpaired.py  unpaired prompt/completion/label feedback (KTO), and preference pairs unpaired
- training.py  load_training_data (the stages' entry point), report_dropped
"""

from wemask_cli.data.columns import apply_column_map, check_column, column_value, has_column, missing_column_message, nested_columns, parse_column_map
from wemask_cli.data.formats import (
    PREFERENCE,
    PROMPTS,
    SUPERVISED,
    DataFormat,
    TrainingData,
    check_rows,
    detect_format,
    is_conversation,
    text_problem,
)
from wemask_cli.data.local import load_local
from wemask_cli.data.readers import LOCAL_SUFFIXES, content_sha256, load_hub, looks_local, read_json_rows, read_text, read_text_file, slice_local
from wemask_cli.data.training import load_training_data, open_dataset, report_dropped
from wemask_cli.data.verl import VERL_ANSWER, is_verl

__all__ = [
    "LOCAL_SUFFIXES", "PREFERENCE", "PROMPTS", "SUPERVISED", "VERL_ANSWER", "DataFormat", "TrainingData", "apply_column_map", "check_column", "check_rows",
    "column_value", "content_sha256", "detect_format", "has_column", "is_conversation", "is_verl", "load_hub", "load_local",
    "load_training_data", "looks_local", "missing_column_message", "nested_columns", "open_dataset",
    "parse_column_map", "read_json_rows", "read_text", "read_text_file", "report_dropped", "slice_local", "text_problem",
]
