"""The forwards of the transformers engine (engines/transformers.py): scoring, option scoring sharing the context's
key/value cache, batch sizing and generation, on a loaded causal LM. Scores are float32, returned on the CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from wemask_cli.engines.base import AUTO_BATCH_START
from wemask_cli.method.batch import pad, positions_of
from wemask_cli.runtime.ranks import map_batches


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def pad_right(sequences: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad(sequences, pad_id, "right")
    return ids.to(device), mask.to(device)


@torch.no_grad()
def token_logprobs(model, sequences: list[list[int]], pad_id: int) -> list[torch.Tensor]:
    """For each sequence, log p(token t | tokens < t) for t = 1..len-1 (float32, on the CPU); one right-padded forward."""
    ids, mask = pad_right(sequences, pad_id, model_device(model))
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    out = []
    for row, seq in enumerate(sequences):
        logp = torch.log_softmax(logits[row, : len(seq) - 1].float(), dim=-1)
        out.append(logp.gather(-1, ids[row, 1 : len(seq)].unsqueeze(-1)).squeeze(-1).cpu())
    return out


@torch.no_grad()
def score_options(model, groups: list[tuple[list[int], list[list[int]]]], pad_id: int, batch_size: int,
                  advance: Callable[[int], None] | None = None) -> list[list[float]]:
    """Engine.score_options with the work shared: each context is read once (batched with contexts of similar
    length, left-padded), only its last logits are kept, and its key/value cache is copied to each of its options;
    one-token options need no further forward, longer ones continue from the cache in one batch. Equal to scoring
    context + option whole."""
    order = sorted(range(len(groups)), key=lambda i: -len(groups[i][0]))

    def score(_k: int, start: int, end: int) -> list[list[float]]:
        chosen = order[start:end]
        scored = _score_group_batch(model, [groups[i] for i in chosen], pad_id)
        if advance:
            advance(sum(len(groups[i][1]) for i in chosen))
        return scored

    out: list[list[float]] = [[] for _ in groups]
    for index, sums in zip(order, map_batches(len(order), batch_size, score)):  # each process its share of the batches
        out[index] = sums
    return out


def _score_group_batch(model, groups, pad_id: int) -> list[list[float]]:
    """One batch of score_options: a context forward with the cache, then one forward of the longer options."""
    device = model_device(model)
    lengths = [len(context) for context, _ in groups]
    ids, mask = pad([context for context, _ in groups], pad_id, "left")
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions_of(mask).to(device),
                use_cache=True, logits_to_keep=1)
    last = torch.log_softmax(out.logits[:, -1].float(), dim=-1).cpu()
    rows = [(row, option) for row, (_, options) in enumerate(groups) for option in options]
    sums = [float(last[row, option[0]]) for row, option in rows]
    longer = [k for k, (_, option) in enumerate(rows) if len(option) > 1]
    if longer:
        select = torch.tensor([rows[k][0] for k in longer])
        name = "cache" if "cache" in out else "past_key_values"  # transformers >= 5.24 calls it `cache`
        cache = out[name]
        cache.batch_select_indices(select.to(device))
        tails = [rows[k][1][:-1] for k in longer]
        tail_ids, tail_mask = pad_right(tails, pad_id, "cpu")
        full_mask = torch.cat([mask[select], tail_mask], dim=1)
        tail_positions = torch.tensor(lengths)[select].unsqueeze(1) + torch.arange(tail_ids.shape[1])
        logits = model(input_ids=tail_ids.to(device), attention_mask=full_mask.to(device),
                       position_ids=tail_positions.to(device), use_cache=True, **{name: cache}).logits
        for j, k in enumerate(longer):
            option = rows[k][1]
            logp = torch.log_softmax(logits[j, : len(option) - 1].float(), dim=-1)
            sums[k] += float(logp.gather(-1, torch.tensor(option[1:], device=logp.device).unsqueeze(-1)).sum())
    result, at = [], 0
    for _, options in groups:
        result.append(sums[at : at + len(options)])
        at += len(options)
    return result


def _out_of_memory(err: BaseException) -> bool:
    return isinstance(err, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(err).lower()


@torch.no_grad()
def fit_batch_size(model, length: int, limit: int, pad_id: int) -> int:
    """`--batch-size auto`: the largest batch (from min(64, limit), halving) whose forward of `length` tokens fits."""
    size = max(1, min(AUTO_BATCH_START, limit))
    device = model_device(model)
    while True:
        try:
            ids = torch.full((size, max(1, length)), pad_id, dtype=torch.long, device=device)
            model(input_ids=ids, use_cache=False)
            return size
        except (RuntimeError, MemoryError) as err:
            if not _out_of_memory(err) or size == 1:
                raise
            size //= 2
            if device.type == "cuda":
                torch.cuda.empty_cache()


@torch.no_grad()
def generate_ids(model, encoded: list[list[int]], pad_id: int, *, max_new_tokens: int, temperature: float, top_p: float,
                 seed: int, batch_size: int, advance: Callable[[int], None]) -> list[list[int]]:
    """New token ids per prompt in left-padded batches, batch k seeded with `seed * 100003 + k` (so a prompt's sample
    does not depend on what ran before, nor on which process ran it); greedy at temperature 0."""
    device, sampling = model_device(model), temperature > 0

    def generate(chunk: int, start: int, end: int) -> list[list[int]]:
        ids, mask = pad(encoded[start:end], pad_id, "left")
        torch.manual_seed(seed * 100_003 + chunk)
        output = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens, do_sample=sampling,
            temperature=temperature if sampling else None, top_p=top_p if sampling else None, top_k=None, pad_token_id=pad_id,
        )
        return output[:, ids.shape[1] :].tolist()

    return map_batches(len(encoded), batch_size, generate, advance)  # under a launcher: each process its share
