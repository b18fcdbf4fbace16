"""Log-likelihood scoring that tasks build on an engine (engines/base.py answers `token_logprobs` and
`score_options`): the conditioning token, rolling windows, lm-eval's context/continuation split, finite checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from wemask_cli.runtime.errors import WeMaskError


def prefix_token_id(tokenizer) -> int:
    """The token a text is conditioned on before its first token: BOS, else EOS (lm-eval's `prefix_token_id`)."""
    token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if token is None:
        raise WeMaskError("the tokenizer has neither a BOS nor an EOS token to condition the first token on")
    return token


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


def score_windows(engine, windows: list[tuple[list[int], int]], batch_size: int, advance: Callable[[int], None]) -> list[float]:
    """The summed log-likelihood of each window's scored tokens (under a launcher, each process scores its share of
    the batches: runtime.ranks.map_batches)."""
    from wemask_cli.runtime.ranks import map_batches

    def score(_k: int, start: int, end: int) -> list[float]:
        batch = windows[start:end]
        return [float(logp[first - 1 :].sum()) for (_, first), logp in zip(batch, engine.token_logprobs([s for s, _ in batch]))]

    return map_batches(len(windows), batch_size, score, advance)


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
