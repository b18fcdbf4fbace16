"""An eval task from another package that declares its own flag, as an IFEval-like task would
(tests/test_eval_task_flags.py). Installed only as an entry point (`wemask.eval_tasks`); needs no torch to import.

`toy-flag`: the first words of each sentence of the bundled perplexity text are a prompt; the model completes it
greedily with up to `--toy-max-new` tokens (its own flag, default DEFAULT_MAX_NEW); the metric is the mean
completion length in tokens.
"""

from __future__ import annotations

import re

from wemask_cli.eval.data import open_source
from wemask_cli.eval.stats import Metric, mean_se
from wemask_cli.eval.tasks import Prepared, Scored, Task, TaskFlag, register

DEFAULT_MAX_NEW = 6


@register
class ToyFlagTask(Task):
    name = "toy-flag"
    summary = "toy plugin with its own flag"
    description = "toy plugin: mean completion length, at most --toy-max-new tokens"
    primary = "mean_tokens"
    bundled = "perplexity.txt"
    unit = "sentences"
    options = (TaskFlag("toy_max_new", int, "{tasks}: new tokens per completion at most (toy plugin's own flag)."),)

    def max_new(self) -> int:
        return self.settings.option("toy_max_new") or DEFAULT_MAX_NEW

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
        completions = generate(model, tokenizer, encoded, max_new_tokens=self.max_new(), temperature=0.0, top_p=1.0,
                               seed=seed, batch_size=batch_size, advance=advance)
        lengths = [float(len(tokenizer(text, add_special_tokens=False).input_ids)) for text in completions]
        records = [{"prompt": row["prompt"], "completion": text, "tokens": n, "max_new": self.max_new()}
                   for row, text, n in zip(rows, completions, lengths)]
        return Scored({"mean_tokens": Metric(sum(lengths) / len(lengths), mean_se(lengths), lengths)}, len(rows), records)
