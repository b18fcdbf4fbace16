"""A row far longer than --max-length tokens can hold is cut by characters before TRL tokenizes it: a 50 MB row with
--max-length 64 was tokenized whole and the process OOM-killed at 8.5 GB with no message. What TRL trains on is
unchanged (the same token ids as TRL's own truncation of the whole row), and where TRL keeps the whole text
(packing that splits long sequences) nothing is cut. Tiny model, real TRL trainers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import run_main
from datasets import Dataset
from transformers import AutoTokenizer
from trl import SFTTrainer

from wemask_cli.train.long_rows import character_budget
from wemask_cli.train.options import TrainOptions
from wemask_cli.train.run import run
from wemask_cli.train.sft import SFTStage

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over the lazy dog; what is 12 plus 30? the answer is 42.".split()
TRL = ["--per-device-train-batch-size", "2", "--max-length", "64", "--report-to", "none", "--seed", "0", "--max-steps", "1"]


def long_text(characters: int) -> str:
    rng = random.Random(0)
    return " ".join(rng.choice(WORDS) for _ in range(characters // 3))[:characters]


@pytest.fixture
def long_data(tmp_path) -> Path:
    """sft_chat's first rows, with one reply of 2 million characters (line 3) and one 300,000-character prompt."""
    rows = [json.loads(line) for line in (ROOT / "data" / "sft_chat.jsonl").read_text().splitlines()[:6]]
    rows[2]["messages"][-1]["content"] = long_text(2_000_000)
    rows[4]["messages"][0]["content"] = long_text(300_000)
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_huge_row_is_cut_before_tokenizing_and_trains_on_what_trl_keeps(monkeypatch, capsys, tmp_path, tiny_model_dir, long_data):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", str(long_data), "-o", str(tmp_path / "cli"), *TRL)
    budget = character_budget(AutoTokenizer.from_pretrained(tiny_model_dir), 64)
    assert code == 0 and "Traceback" not in err, err
    assert (f"wemask: sft: 2 examples of --dataset held text of up to 2,000,000 characters, far more than --max-length 64 tokens can "
            f"hold: cut to its first {budget:,} characters before tokenizing (TRL keeps the first 64 tokens either way)") in err.splitlines()
    cut = run(SFTStage(), TrainOptions(model=tiny_model_dir, output_dir=str(tmp_path / "run"), dataset=str(long_data)), TRL)
    whole = SFTTrainer(model=cut.trainer.model, args=cut.trainer.args, processing_class=cut.trainer.processing_class,
                       train_dataset=Dataset.from_list([json.loads(line) for line in long_data.read_text().splitlines()]))  # TRL alone, whole rows
    assert cut.trainer.train_dataset["input_ids"] == whole.train_dataset["input_ids"]


def test_nothing_is_cut_where_packing_keeps_the_whole_text(monkeypatch, capsys, tmp_path, tiny_model_dir, long_data):
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", str(long_data), "-o", str(tmp_path / "r"),
                            *TRL, "--packing", "--packing-strategy", "wrapped")
    assert code == 0 and "before tokenizing" not in err, err
