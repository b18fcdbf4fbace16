"""An eval task from another package that declares its own flag, as an IFEval-like task would
(tests/test_eval_task_flags.py). Installed only as an entry point (`wemask.eval_tasks`); needs no torch to import.

`toy-flag`: the toy-length task (tests/toy_eval_task.py) whose completions have at most `--toy-max-new` tokens (its
own flag; default the toy-length's); each record says the length it was given.
"""

from __future__ import annotations

from toy_eval_task import ToyLengthTask

from wemask_cli.eval.tasks import TaskFlag, register


@register
class ToyFlagTask(ToyLengthTask):
    name = "toy-flag"
    summary = "toy plugin with its own flag"
    description = "toy plugin: mean completion length, at most --toy-max-new tokens"
    options = (TaskFlag("toy_max_new", int, "{tasks}: new tokens per completion at most (toy plugin's own flag)."),)

    def max_new(self) -> int:
        return self.settings.option("toy_max_new") or super().max_new()

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance):
        scored = super().evaluate(model, tokenizer, prepared, seed, batch_size, advance)
        for record in scored.records:
            record["max_new"] = self.max_new()
        return scored
