"""An eval task declared outside the package, as a plugin's module would (tests/test_eval_task_plugin.py).

`toy-length`: each sentence of the bundled perplexity text is a prompt (its first five words); the model completes it
greedily with up to MAX_NEW tokens, and the metric is the mean completion length in tokens. Importing this module
registers it and needs no torch.
"""

from __future__ import annotations

import re

from wemask_cli.eval.data import open_source
from wemask_cli.eval.stats import Metric, mean_se
from wemask_cli.eval.tasks import Prepared, Scored, Task, register

MAX_NEW = 6


@register
class ToyLengthTask(Task):
    name = "toy-length"
    summary = "toy plugin: mean completion length in tokens"
    primary = "mean_tokens"
    bundled = "perplexity.txt"
    unit = "sentences"

    def max_new(self) -> int:
        return MAX_NEW

    def load(self):
        s = self.settings
        source = open_source(s.data, self.bundled, s.split, s.data_config, s.limit)
        sentences = [part.strip() for part in re.split(r"(?<=\.)\s+", source.text or "") if part.strip()]
        prompts = [" ".join(sentence.split()[:5]) for sentence in sentences][: s.limit]
        return source.data(self.name, rows=[{"prompt": p} for p in prompts], fields={"prompt": "(sentences)"})

    def prepare(self, tokenizer, data, max_positions):
        encoded = [tokenizer(row["prompt"]).input_ids for row in data.rows]
        return Prepared(len(encoded), max(map(len, encoded)) + self.max_new(), (data.rows, encoded), encoded)

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance):
        from wemask_cli.engines.generation import generate

        rows, encoded = prepared.payload
        completions = generate(model, tokenizer, encoded, max_new_tokens=self.max_new(), temperature=0.0, top_p=1.0, seed=seed,
                               batch_size=batch_size, advance=advance)
        lengths = [float(len(tokenizer(text, add_special_tokens=False).input_ids)) for text in completions]
        records = [{"prompt": row["prompt"], "completion": text, "tokens": n} for row, text, n in zip(rows, completions, lengths)]
        return Scored({"mean_tokens": Metric(sum(lengths) / len(lengths), mean_se(lengths), lengths)}, len(rows), records)
