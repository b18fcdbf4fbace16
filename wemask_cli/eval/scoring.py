"""Log-likelihood scoring on a loaded causal LM: token log-probs, rolling windows, options sharing their context.

All scores are float32 log-probabilities computed on the model's device and returned on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..engines import engine_of
from ..errors import WeMaskError
from ..method.batch import pad, positions_of

AUTO_BATCH_START = 64


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def prefix_token_id(tokenizer) -> int:
    """The token a text is conditioned on before its first token: BOS, else EOS (lm-eval's `prefix_token_id`)."""
    token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if token is None:
        raise WeMaskError("the tokenizer has neither a BOS nor an EOS token to condition the first token on")
    return token


def pad_right(sequences: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad(sequences, pad_id, "right")
    return ids.to(device), mask.to(device)


@torch.no_grad()
def token_logprobs(model, sequences: list[list[int]], pad_id: int) -> list[torch.Tensor]:
    """For each sequence, log p(token t | tokens < t) for t = 1..len-1 (float32, on the CPU); one right-padded forward
    (an engine such as vLLM scores them with its own prompt log-probabilities)."""
    if engine_of(model) != "transformers":
        return model.token_logprobs(sequences)
    ids, mask = pad_right(sequences, pad_id, model_device(model))
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    out = []
    for row, seq in enumerate(sequences):
        logp = torch.log_softmax(logits[row, : len(seq) - 1].float(), dim=-1)
        out.append(logp.gather(-1, ids[row, 1 : len(seq)].unsqueeze(-1)).squeeze(-1).cpu())
    return out


def require_finite_scores(scores: list[float], unit: str) -> None:
    """Refuse log-likelihoods holding NaN or infinity (a model whose weights or activations overflow): no metric
    is reported from them, and the row is not counted as correct or wrong."""
    if not all(math.isfinite(score) for score in scores):
        shown = ", ".join(f"{score:g}" for score in scores[:6])
        raise WeMaskError(
            f"{unit}: the model's log-likelihood is not finite ({shown}): its weights or activations overflow, so no "
            "metric can be computed; check the model (another checkpoint, or --dtype float32)"
        )


# ------------------------------------------------------------------------------------------- rolling windows


def rolling_windows(tokens: list[int], prefix: int, max_len: int, stride: int | None = None) -> list[tuple[list[int], int]]:
    """Windows that score every token of `tokens` exactly once, like lm-eval's `loglikelihood_rolling`.

    Each window is (sequence, first): the model reads sequence[:-1] (at most `max_len` tokens) and the window scores
    log p(sequence[t] | sequence[:t]) for t >= first. The first window starts with `prefix` (BOS/EOS) and scores up to
    `max_len` tokens; each later window scores the next `stride` tokens (default `max_len`: lm-eval's windows,
    one token of carried context) with the preceding tokens, up to `max_len - stride + 1` of them, as context.
    """
    stride = max_len if stride is None else stride
    if not 1 <= stride <= max_len:
        raise WeMaskError(f"--stride {stride} must be between 1 and the window ({max_len} tokens)")
    if not tokens:
        return []
    first = min(max_len, len(tokens))
    windows = [([prefix] + tokens[:first], 1)]
    done = first
    while done < len(tokens):
        count = min(len(tokens) - done, stride)
        end = done + count
        sequence = tokens[max(0, end - max_len - 1) : end]
        windows.append((sequence, len(sequence) - count))
        done = end
    return windows


def score_windows(model, windows: list[tuple[list[int], int]], pad_id: int, batch_size: int,
                  advance: Callable[[int], None]) -> list[float]:
    """The summed log-likelihood of each window's scored tokens."""
    sums = []
    for start in range(0, len(windows), batch_size):
        batch = windows[start : start + batch_size]
        for (sequence, first), logp in zip(batch, token_logprobs(model, [s for s, _ in batch], pad_id)):
            sums.append(float(logp[first - 1 :].sum()))
        advance(len(batch))
    return sums


# ------------------------------------------------------------------------------------------- options


def encode_pair(tokenizer, context: str, continuation: str, add_special_tokens: bool) -> tuple[list[int], list[int]]:
    """lm-eval's `_encode_pair`: trailing spaces of the context move to the continuation, the whole text is
    tokenized once and split where the context's own tokens end."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer(context + continuation, add_special_tokens=add_special_tokens).input_ids
    context_ids = tokenizer(context, add_special_tokens=add_special_tokens).input_ids
    return context_ids, whole[len(context_ids) :]


@torch.no_grad()
def score_options(model, groups: list[tuple[list[int], list[list[int]]]], pad_id: int, batch_size: int,
                  advance: Callable[[int], None] | None = None) -> list[list[float]]:
    """log p(option | context) summed over the option's tokens, for every (context ids, [option ids]) group.

    Work is shared: each context is read once (batched with contexts of similar length, left-padded), only its
    last logits are kept, and its key/value cache is copied to each of its options; one-token options need no
    further forward, longer ones continue from the cache in one batch. Equal to scoring context + option whole,
    which is what an engine such as vLLM does (its prefix cache shares the context).
    """
    if engine_of(model) != "transformers":
        return _score_options_whole(model, groups, batch_size, advance)
    order = sorted(range(len(groups)), key=lambda i: -len(groups[i][0]))
    out: list[list[float]] = [[] for _ in groups]
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        for index, sums in zip(chosen, _score_group_batch(model, [groups[i] for i in chosen], pad_id)):
            out[index] = sums
        if advance:
            advance(sum(len(groups[i][1]) for i in chosen))
    return out


def _score_options_whole(model, groups, batch_size: int, advance: Callable[[int], None] | None) -> list[list[float]]:
    """score_options on an engine: each context + option scored as one sequence."""
    pairs = [(context + option, len(option)) for context, options in groups for option in options]
    sums = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        sums.extend(float(logp[-length:].sum()) for (_, length), logp in zip(batch, token_logprobs(model, [s for s, _ in batch], 0)))
        if advance:
            advance(len(batch))
    result, at = [], 0
    for _, options in groups:
        result.append(sums[at : at + len(options)])
        at += len(options)
    return result


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


# ------------------------------------------------------------------------------------------- batch size


def _out_of_memory(err: BaseException) -> bool:
    return isinstance(err, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(err).lower()


@torch.no_grad()
def auto_batch_size(model, length: int, limit: int, pad_id: int) -> int:
    """`--batch-size auto`: the largest batch (from min(64, limit), halving) whose forward of `length` tokens fits."""
    size = max(1, min(AUTO_BATCH_START, limit))
    if engine_of(model) != "transformers":
        return size  # an engine schedules its own batches
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
