"""perplexity: every token of the texts scored exactly once, in rolling windows (lm-eval's loglikelihood_rolling).

Metrics, named as lm-eval names them: `perplexity` (per token, the primary), `word_perplexity` (per
whitespace-separated word), `byte_perplexity` (per UTF-8 byte) and `bits_per_byte`. Each text is one document
(a .txt or text file: the whole file; a dataset: one per row), tokenized without special tokens and conditioned
on BOS (else EOS) for its first token. `--window` is the longest input; `--stride S` scores S new tokens per later
window with the rest as context (default: the window, one token of context, like lm-eval). The standard error of
`perplexity` is over windows (delta method); the others' over documents (n/a for one).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from wemask_cli.data import column_value
from wemask_cli.eval.data import EvalData, open_source, pick_field
from wemask_cli.eval.stats import Metric, exp_metric, mean_se
from wemask_cli.eval.tasks.base import CALIBRATION, Prepared, Scored, Task
from wemask_cli.eval.tasks.registry import register
from wemask_cli.runtime.errors import WeMaskError


@dataclass
class Window:
    doc: int
    sequence: list[int]
    first: int  # the first scored position

    @property
    def scored(self) -> int:
        return len(self.sequence) - self.first


@register
class PerplexityTask(Task):
    name = "perplexity"
    primary = "perplexity"
    bundled = "perplexity.txt"
    summary = "every token scored once in rolling windows"
    description = "every token scored once in rolling windows: perplexity, word_perplexity, byte_perplexity, bits_per_byte"
    unit = "windows"
    data_unit = "text(s)"
    flags = frozenset({"text_field", "window", "stride"})
    columns = {"text": ("text", "content", "document", "page")}

    def load(self) -> EvalData:
        s = self.settings
        source = open_source(s.data, self.bundled, s.split, s.data_config, None)
        if source.text is not None:
            return source.data(self.name, texts=[source.text])
        name = pick_field(source.rows, s.text_field, self.columns["text"], "--text-field", source.where)
        texts = [str(v) for v in (column_value(row, name) for row in source.rows) if v not in (None, "")]
        if not any(t.strip() for t in texts):
            raise WeMaskError(f"{source.where}: the {name!r} column holds no text")
        return source.data(self.name, texts=texts, fields={"text": name})

    def prepare(self, tokenizer, data: EvalData, max_positions: int | None) -> Prepared:
        from wemask_cli.eval.scoring import prefix_token_id, rolling_windows

        s = self.settings
        if max_positions and s.window > max_positions:
            raise WeMaskError(f"--window {s.window} is longer than the model's context ({max_positions} positions)")
        prefix = prefix_token_id(tokenizer)
        docs = [tokenizer(text, add_special_tokens=False, verbose=False).input_ids for text in data.texts]
        windows = [Window(d, seq, first) for d, ids in enumerate(docs) for seq, first in rolling_windows(ids, prefix, s.window, s.stride)]
        if not windows:
            raise WeMaskError("the perplexity text has no tokens")
        windows = windows[: s.limit] if s.limit else windows
        longest = max(len(w.sequence) for w in windows) - 1
        return Prepared(len(windows), longest, (windows, docs, data.texts), [w.sequence[:-1] for w in windows[:CALIBRATION]])

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance) -> Scored:
        from wemask_cli.eval.scoring import require_finite_scores, score_windows

        windows, docs, texts = prepared.payload
        sums = score_windows(model, [(w.sequence, w.first) for w in windows], batch_size, advance)
        for index, total in enumerate(sums):
            require_finite_scores([total], f"perplexity window {index} (document {windows[index].doc})")
        nll, tokens = -sum(sums), sum(w.scored for w in windows)
        per_window = [-total / w.scored for total, w in zip(sums, windows)]
        metrics = {"perplexity": exp_metric(per_window, math.exp(nll / tokens))}
        metrics.update(text_metrics(tokenizer, windows, sums, docs, texts))
        records = [
            {"window": i, "doc": w.doc, "tokens": w.scored, "context_tokens": w.first - 1, "nll": -total / w.scored,
             "context": tokenizer.decode(w.sequence[: w.first]), "text": tokenizer.decode(w.sequence[w.first :])}
            for i, (total, w) in enumerate(zip(sums, windows))
        ]
        return Scored(metrics, len(windows), records)


def count_words(text: str) -> int:
    """lm-eval's word count: pieces between runs of whitespace."""
    return len(re.split(r"\s+", text))


def text_metrics(tokenizer, windows: list[Window], sums: list[float], docs: list[list[int]], texts: list[str]) -> dict[str, Metric]:
    """word_perplexity, byte_perplexity, bits_per_byte over the scored text (a document cut by --limit: its scored part)."""
    per_doc: dict[int, list] = {}
    for total, w in zip(sums, windows):
        entry = per_doc.setdefault(w.doc, [0.0, 0])
        entry[0] -= total
        entry[1] += w.scored
    nll = words = size = 0
    word_items, byte_items = [], []
    for doc, (doc_nll, scored) in per_doc.items():
        text = texts[doc] if scored == len(docs[doc]) else tokenizer.decode(docs[doc][:scored])
        doc_words, doc_bytes = count_words(text), len(text.encode("utf-8"))
        nll, words, size = nll + doc_nll, words + doc_words, size + doc_bytes
        word_items.append(doc_nll / doc_words)
        byte_items.append(doc_nll / doc_bytes)
    bpb_items = [b / math.log(2) for b in byte_items]
    return {
        "word_perplexity": exp_metric(word_items, math.exp(nll / words), pairable=False),
        "byte_perplexity": exp_metric(byte_items, math.exp(nll / size), pairable=False),
        "bits_per_byte": Metric(nll / size / math.log(2), mean_se(bpb_items), bpb_items, pairable=False),
    }
