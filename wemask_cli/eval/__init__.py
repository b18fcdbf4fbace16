"""Layer 4, a command family's machinery (ranks: tests/test_layers.py).

`wemask eval`'s machinery (rich-free; the command is commands/eval.py, the table render/eval.py).

- settings.py      EvalSettings: the flags (tasks/resolve.py checks them against the task and fills its defaults)
- data.py          reading examples: bundled sets, files, folders, plain text, hub; columns and dotted paths
- tasks/           one class per task (perplexity, choice, math, refusal, lm-eval) on the Task interface; the registry
                   (`@register`, entry-point group `wemask.eval_tasks`)
- scoring.py       log-likelihoods: token log-probs, rolling windows, options sharing their context, batch size auto
- generation.py    batched, seeded generation with left truncation (math, refusal)
- stats.py         Metric, standard errors (n - 1), paired changes and their tests, summaries over seeds
- sweep.py         axes and settings (mask rate; quantization), the one-load sweep over every variant
- document.py      metrics.json, results.csv, examples.jsonl and their provenance
- quantize/        the quantization axis (simulated W8A8 / W4A8 / W4A4 / FP4; schemes.py registers them)
"""
