"""Which tokens carry massive activations in `wemask locate`'s prompts (issue 12: is `--tokens massive` different
from `--tokens first` on this model?).

During locate's own forward pass (no extra pass), a pre-hook on every decoder layer records each real token's
input norm. A token is massive at a layer when that norm exceeds `MASSIVE_RATIO` times the median norm of the
tokens it can see (itself and those before it, the first token excluded), the rule `--tokens massive` applies at
the masked layers (method/tokens.py); here it is checked at every layer from the ME layer on. That rule always
masks the first token; the report lists it when it is massive against the median of all the other tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from wemask_cli.method.arch import base_model, decoder_layers
from wemask_cli.method.tokens import MASSIVE_RATIO


class NormRecorder:
    """Per prompt, a (layers, tokens) tensor of input norms, filled while the decoder runs (a prompt repeated: by its
    last batch). `runs(k)`: whether batch k runs through this decoder (some batches only: collect's `shares`)."""

    def __init__(self, token_ids: list[list[int]], num_layers: int, runs: Callable[[int], bool] | None = None):
        self.rows = {}
        for index, ids in enumerate(token_ids):
            self.rows.setdefault(tuple(ids), []).append(index)
        self.norms: list[torch.Tensor | None] = [None] * len(token_ids)
        self.written = [-1] * len(token_ids)  # the batch that wrote each prompt's norms
        self.num_layers = num_layers
        self.runs, self.k = runs, -1  # the batches that run here, the current one
        self.batch: list[tuple[list[int], int]] = []  # (prompt indices, row in the batch) of the current batch
        self.mask: torch.Tensor | None = None

    @classmethod
    def merge(cls, parts: list[NormRecorder]) -> NormRecorder:
        """The norms of parts that ran some batches each: each prompt's from the part whose batch wrote it last."""
        merged = parts[0]
        for part in parts[1:]:
            for index, batch in enumerate(part.written):
                if batch > merged.written[index]:
                    merged.norms[index], merged.written[index] = part.norms[index], batch
        return merged

    def start_batch(self, module, args, kwargs) -> None:
        """Decoder pre-hook: which prompts this batch holds (matched by their token ids)."""
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is None:
            self.batch = []
            return
        mask = torch.ones_like(ids) if mask is None else mask
        self.mask, self.batch = mask.bool(), []
        self.k += 1
        while self.runs is not None and not self.runs(self.k):
            self.k += 1
        for row in range(ids.shape[0]):
            key = tuple(ids[row][self.mask[row]].tolist())
            if key in self.rows:
                self.batch.append((self.rows[key], row))

    def layer_hook(self, index: int):
        def record(module, args, kwargs) -> None:
            hidden = args[0] if args else kwargs.get("hidden_states")
            if hidden is None or not self.batch:
                return
            norms = hidden.detach().float().norm(dim=-1).cpu()
            for prompts, row in self.batch:
                values = norms[row][self.mask[row].cpu()]
                for prompt in prompts:
                    if self.norms[prompt] is None:
                        self.norms[prompt] = torch.zeros(self.num_layers, values.numel())
                    self.norms[prompt][index] = values
                    self.written[prompt] = self.k

        return record


@contextmanager
def recording(model, token_ids: list[list[int]], runs: Callable[[int], bool] | None = None) -> Iterator[NormRecorder]:
    """Record the decoder layers' input norms of these prompts while the block runs (`runs`: NormRecorder's);
    hooks removed after."""
    layers = decoder_layers(model)
    recorder = NormRecorder(token_ids, len(layers), runs)
    handles = [base_model(model).get_decoder().register_forward_pre_hook(recorder.start_batch, with_kwargs=True)]
    handles += [layer.register_forward_pre_hook(recorder.layer_hook(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        yield recorder
    finally:
        for handle in handles:
            handle.remove()


def prefix_ratio(norms: torch.Tensor) -> torch.Tensor:
    """(layers, tokens): each token's norm over the median norm of the tokens up to and including it, the first
    token excluded (as `--tokens massive` does); the first token's over the median of all the others (NaN alone)."""
    length = norms.shape[-1]
    seen = torch.ones(length, length, dtype=torch.bool).tril()
    seen[:, 0], seen[0, 1:] = False, True
    medians = [row[None, :].expand(length, -1).masked_fill(~seen, float("nan")).nanmedian(dim=-1).values for row in norms]
    return norms / torch.stack(medians).clamp_min(1e-12)  # one layer at a time: (tokens, tokens) memory


def massive_tokens(recorder: NormRecorder, token_ids: list[list[int]], tokenizer, from_layer: int) -> dict:
    """Per prompt, the tokens (position, text) whose input norm is massive at some layer >= from_layer."""
    prompts = []
    for index, ids in enumerate(token_ids):
        norms = recorder.norms[index]
        if norms is None:
            continue
        ratio = prefix_ratio(norms[from_layer:])
        flagged = ratio > MASSIVE_RATIO
        tokens = [
            {"position": int(p), "text": tokenizer.decode([ids[p]]), "layers": int(flagged[:, p].sum()),
             "max_ratio": float(ratio[:, p].max())}
            for p in flagged.any(dim=0).nonzero().flatten().tolist()
        ]  # fmt: skip
        prompts.append({"index": index, "tokens": tokens})
    beyond = [p for p in prompts if any(t["position"] > 0 for t in p["tokens"])]
    texts = Counter(text for p in beyond for text in {t["text"] for t in p["tokens"] if t["position"] > 0})
    return {
        "ratio": MASSIVE_RATIO, "from_layer": from_layer, "prompts": prompts, "beyond_first": len(beyond),
        "first_massive": sum(any(t["position"] == 0 for t in p["tokens"]) for p in prompts),
        "texts_beyond_first": [{"text": text, "prompts": n} for text, n in texts.most_common()],
    }  # fmt: skip


def describe(summary: dict) -> str:
    """One sentence for the verdict: does `--tokens massive` mask more than the first token here?"""
    total, first = len(summary["prompts"]), summary["first_massive"]
    rule = f"input norm over {summary['ratio']:g}x the median of the tokens up to it, from layer {summary['from_layer']} on"
    if not summary["beyond_first"]:
        none = f" (none in the other {total - first})" if first < total else ""
        return (
            f" Massive activations ({rule}) sit only on the first token in {first}/{total} prompts{none}: "
            "--tokens massive equals --tokens first here."
        )
    texts = ", ".join(f"{t['text']!r} in {t['prompts']}" for t in summary["texts_beyond_first"][:5])
    example = next(t for p in summary["prompts"] for t in p["tokens"] if t["position"] > 0)
    index = next(p["index"] for p in summary["prompts"] if example in p["tokens"])
    return (
        f" Massive activations ({rule}) sit on other tokens than the first in {summary['beyond_first']}/{total} prompts "
        f"({texts}; e.g. prompt {index}, position {example['position']} {example['text']!r}): --tokens massive masks "
        "more than --tokens first here."
    )
