"""Examples far longer than --max-length tokens can hold are cut by characters before TRL tokenizes them.

SFT, DPO and KTO keep the first `max_length` tokens of each example (truncation keep_start), and no token holds more
characters than the tokenizer's longest vocabulary entry. So each text (plain, or a message's content) is cut to
`MARGIN` times `max_length` such entries: what TRL trains on is unchanged, while a 50 MB row is no longer tokenized
whole (gigabytes of token ids and offsets, then the out-of-memory killer). Not where TRL keeps the whole text:
packing that splits long sequences (`--packing-strategy bfd_split`, `wrapped`), or a trainer without `max_length`
(GRPO).
"""

from __future__ import annotations

from wemask_cli.data.formats import cut_long_texts
from wemask_cli.runtime.progress import say

MARGIN = 2  # twice what max_length tokens can span: tokenizing a prefix changes at most the tokens near its end


def keeps_first_tokens(args) -> bool:
    """Whether the trainer keeps only the first `args.max_length` tokens of every example."""
    if getattr(args, "max_length", None) is None or getattr(args, "truncation_mode", "keep_start") != "keep_start":
        return False
    return not (getattr(args, "packing", False) and getattr(args, "packing_strategy", "bfd") != "bfd")


def character_budget(tokenizer, max_length: int) -> int:
    """How many characters of one text the trainer could ever read: MARGIN x max_length x the longest vocabulary
    entry (its spelling, at least as long as the text it decodes to)."""
    vocabulary = getattr(tokenizer, "tokenizer", tokenizer).get_vocab()  # a processor holds its tokenizer
    return MARGIN * max_length * max((len(entry) for entry in vocabulary), default=1)


def cut_long_rows(stage_name: str, dataset, tokenizer, args, what: str = "--dataset"):
    """The dataset with each text (of any column) beyond what --max-length tokens can hold cut before tokenizing,
    said in one line."""
    if dataset is None or not keeps_first_tokens(args):
        return dataset
    budget = character_budget(tokenizer, args.max_length)
    dataset, cut, longest = cut_long_texts(dataset, tuple(dataset.column_names), budget)
    if cut:
        examples = "1 example" if cut == 1 else f"{cut} examples"
        say(f"{stage_name}: {examples} of {what} held text of up to {longest:,} characters, far more than --max-length "
            f"{args.max_length} tokens can hold: cut to its first {budget:,} characters before tokenizing (TRL keeps "
            f"the first {args.max_length} tokens either way)")
    return dataset
