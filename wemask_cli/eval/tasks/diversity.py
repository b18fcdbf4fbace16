"""diversity: how alike the token representations and how spread the attention are, per layer (SPEC section 6).

Each prompt runs once per variant through the model as the variant leaves it (the WeMask hook included); the measures
are method/diversity.py's: `cosine`, `effective_rank`, `participation_ratio`, `attention_entropy` over the prompt's
real tokens, each also as `<name>_rest` (the first token excluded), and `sink_mass`. A metric is one number per
prompt, the mean over the layers from `from_layer` on (default: the ME layer: the mask's, else the one located
on these prompts, else 0), with its standard error over prompts; `--per-layer` adds each layer's as
`<name>@<layer>`. examples.jsonl holds every prompt's values at every layer. The primary metric is
`effective_rank_rest`. Prompts: the bundled locate prompts or --data (one text or chat message list per row, or
lines of text), at most --window tokens each.
"""

from __future__ import annotations

import math

from wemask_cli.data import column_value
from wemask_cli.data.readers import text_lines
from wemask_cli.eval.data import EvalData, open_source, pick_field, read_path, require_text
from wemask_cli.eval.stats import mean_metric
from wemask_cli.eval.tasks.base import CALIBRATION, Prepared, Scored, Task, TaskFlag
from wemask_cli.eval.tasks.registry import register
from wemask_cli.runtime.errors import WeMaskError

LOCATE_PROMPTS = "locate_prompts.jsonl"  # in wemask_cli/resources: `wemask locate`'s default prompts


@register
class DiversityTask(Task):
    name = "diversity"
    primary = "effective_rank_rest"
    bundled = LOCATE_PROMPTS
    unit = "prompts"
    summary = "diversity of token representations and attention per layer"
    description = ("mean pairwise cosine, effective rank, participation ratio and attention entropy of each prompt's "
                   "tokens (each also _rest: first token excluded) and sink_mass, averaged over the layers from the ME layer on")
    flags = frozenset({"text_field", "window"})
    options = (
        TaskFlag("from_layer", int, "{tasks}: the first layer (0-based) the metrics average over (default: the mask's ME "
                 "layer, else the one located on the prompts, else 0)."),
        TaskFlag("per_layer", bool, "{tasks}: also report each measure at every layer, as METRIC@LAYER."),
    )
    columns = {"text": ("text", "prompt", "messages", "question", "content")}
    needs = frozenset({"module"})

    def __init__(self, settings):
        super().__init__(settings)
        self.start: tuple[int, str] | None = None  # (first summarized layer, how it was chosen), fixed at the first variant

    def source(self):
        """--data, or the bundled locate prompts."""
        s = self.settings
        if s.data is not None:
            return open_source(s.data, self.bundled, s.split, s.data_config, s.limit)
        from wemask_cli import resources

        with resources.as_file(LOCATE_PROMPTS) as path:
            source = read_path(path, f"the bundled {LOCATE_PROMPTS}", None)
        source.path, source.reader = f"wemask_cli/resources/{LOCATE_PROMPTS}", f"bundled {source.reader}"
        return source

    def load(self) -> EvalData:
        s = self.settings
        source = self.source()
        if source.text is not None:
            prompts = [line.strip() for line in text_lines(source.text) if line.strip()][: s.limit]
            return source.data(self.name, rows=[{"prompt": p} for p in prompts], fields={"text": "(text lines)"})
        rows, labels = source.rows[: s.limit], source.labels[: s.limit]
        if s.text_field:  # else each row's first column of `columns` that it has (locate's text or messages rows)
            pick_field(rows, s.text_field, self.columns["text"], "--text-field", source.where)
        names = [s.text_field] if s.text_field else list(self.columns["text"])
        prompts = []
        for row, label in zip(rows, labels):
            name = next((n for n in names if column_value(row, n) not in (None, "")), names[0])
            prompts.append({"prompt": require_text(column_value(row, name), name, label, source.where, messages=True)})
        return source.data(self.name, rows=prompts, fields={"text": "/".join(names)})

    def prepare(self, tokenizer, data: EvalData, max_positions: int | None) -> Prepared:
        from wemask_cli.prompts.rendering import encode

        window = min(self.settings.window, max_positions or self.settings.window)
        ids = encode(tokenizer, [row["prompt"] for row in data.rows], window)
        return Prepared(len(ids), max(map(len, ids)), (data.rows, ids), ids[:CALIBRATION])

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance) -> Scored:
        from wemask_cli.method.arch import resolve_layers
        from wemask_cli.method.batch import pad_id_of
        from wemask_cli.method.diversity import NAMES, collect_diversity
        from wemask_cli.method.locate import plain
        from wemask_cli.runtime.ranks import batch_shares

        rows, ids = prepared.payload
        layers, split = len(resolve_layers(model.module)), batch_shares()
        start = self.first_layer(model.module, ids, batch_size, pad_id_of(tokenizer), layers, split)
        stats = collect_diversity(model.module, ids, batch_size=batch_size, pad_id=pad_id_of(tokenizer), progress=advance,
                                  shares=split)
        metrics, n = {}, {}
        for name in NAMES:
            values = stats.values[name]
            metrics[name], n[name] = prompt_mean(values[:, start:].nanmean(1).tolist())
            if self.settings.option("per_layer"):
                for layer in range(layers):
                    metrics[f"{name}@{layer}"], n[f"{name}@{layer}"] = prompt_mean(values[:, layer].tolist())
        records = [{"prompt": i, "tokens": len(ids[i]), "text": row["prompt"],
                    **{name: [plain(v) for v in stats.values[name][i].tolist()] for name in NAMES}}
                   for i, row in enumerate(rows)]
        return Scored(metrics, n, records)

    def plan(self, configs: list) -> None:
        """The mask's ME layer, when the sweep runs one: every variant averages from it."""
        layers = [config.me_layer for config in configs if config is not None and isinstance(config.me_layer, int)]
        if layers and self.settings.option("from_layer") is None:
            self.start = (layers[0], "the ME layer of the mask")

    def first_layer(self, module, ids, batch_size: int, pad_id: int, layers: int, split=None) -> int:
        """The first layer the metrics average over, chosen once so every variant uses it: --from-layer, the mask's
        ME layer, else the one located on these prompts (the first variant's model), else 0."""
        given = self.settings.option("from_layer")
        if given is not None and not 0 <= given < layers:
            raise WeMaskError(f"--from-layer {given} is not a layer of this model: give 0 to {layers - 1}")
        if self.start is None and given is not None:
            self.start = (given, "--from-layer")
        elif self.start is None:
            from wemask_cli.method.locate import locate

            me = locate(module, ids, batch_size=batch_size, pad_id=pad_id, shares=split).detection.me_layer
            self.start = (me, "the ME layer located on these prompts") if me is not None else (0, "no ME layer found")
        return self.start[0]

    def document_extra(self) -> dict:
        layer, how = self.start if self.start else (None, None)
        return {"diversity": {"from_layer": layer, "from_layer_source": how}}


def prompt_mean(items: list[float]):
    """The mean over the prompts where the value is defined, its standard error, and how many they are."""
    kept = [v for v in items if math.isfinite(v)]
    metric = mean_metric(kept) if kept else mean_metric([math.nan])
    metric.pairable = len(kept) == len(items)  # paired changes need the same prompts on both sides
    return metric, len(kept)
