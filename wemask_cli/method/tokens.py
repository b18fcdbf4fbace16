"""Which tokens WeMask masks, derived statelessly from what a layer receives (SPEC section 3).

`first_token_positions`: the first real token of every sequence. `massive_token_positions`: every real
token whose layer input norm exceeds MASSIVE_RATIO times the median norm of the real tokens it can see,
plus the first real token. Both work under left/right padding, packing (position-id resets or 4D masks)
and are never asked about tokens decoded after a cached prefix (the hooks skip those).
"""

from __future__ import annotations

import torch

from wemask_cli.runtime.errors import WeMaskError

MASSIVE_RATIO = 20.0
"""A token is massive when its input norm exceeds this multiple of the median over the tokens it can see.

Massive activations are one to several hundred times the other tokens' norms (100-160x on the embedded SmolLM2
in the layers after its ME layer, 10-17x at its last layer); ordinary tokens stay within 1.5x of the median
there (a few reach ~10x around layer 5). 20 sits between the two.
"""

MEDIAN_BLOCK = 1 << 22  # elements per chunk of the (batch, queries, keys) median, to bound memory at long contexts


def first_token_positions(
    attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, batch: int, length: int
) -> torch.Tensor:
    """Boolean (batch, length): which positions of this forward are the first real token of a sequence.

    - 4D masks (sdpa, eager; also packed sequences): a first token is one that may attend to exactly one
      key, itself. This holds under left and right padding and for every packed sequence start, and never
      for a token decoded after a cached prefix.
    - 2D masks (flash attention, covering cached + new keys): the first key whose mask is 1.
    - No mask (unpadded causal batches): the positions whose position id is 0.
    """
    if attention_mask is None:
        if position_ids is None:
            raise WeMaskError("the attention layer received neither an attention mask nor position ids")
        return (position_ids == 0).expand(batch, length)
    check_mask_type(attention_mask)
    if attention_mask.dim() == 4:
        return (allowed_keys(attention_mask).sum(-1) == 1).expand(batch, length)
    if attention_mask.dim() == 2:
        real = attention_mask.bool()
        first = real & (real.cumsum(-1) == 1)
        return first[:, -length:]
    raise WeMaskError(f"unexpected attention mask of shape {tuple(attention_mask.shape)} in the attention layer")


def check_mask_type(attention_mask) -> None:
    if not isinstance(attention_mask, torch.Tensor):
        raise WeMaskError(
            f"attention masks of type {type(attention_mask).__name__} are not supported by WeMask: "
            "load the model with attn_implementation 'sdpa', 'eager' or 'flash_attention_2'"
        )


def allowed_keys(mask4d: torch.Tensor) -> torch.Tensor:
    """(batch, queries, keys) boolean from a 4D boolean or additive float mask (head dim 1); also takes (batch, 1, n)."""
    if mask4d.dtype == torch.bool:
        return mask4d[:, 0]
    return mask4d[:, 0] > torch.finfo(mask4d.dtype).min / 2


def visible_keys(
    attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, batch: int, length: int
) -> torch.Tensor:
    """(batch, length, length) boolean: which of this forward's tokens each token may attend to (no cache).

    From the 4D mask as given (padding, packing, sliding windows); from a 2D mask, causal over real tokens;
    without a mask, causal within each sequence of a packed row (position ids restarting at 0).
    """
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    if attention_mask is not None:
        check_mask_type(attention_mask)
        if attention_mask.dim() == 4:
            return allowed_keys(attention_mask)[..., :length].to(torch.bool).expand(batch, length, length)
        if attention_mask.dim() == 2:
            real = attention_mask[:, -length:].bool()
            return causal.to(real.device) & real[:, None, :] & real[:, :, None]
        raise WeMaskError(f"unexpected attention mask of shape {tuple(attention_mask.shape)} in the decoder layer")
    if position_ids is None:
        return causal.expand(batch, length, length)
    segment = (position_ids == 0).cumsum(-1).expand(batch, length)
    same = segment[:, :, None] == segment[:, None, :]
    return causal.to(same.device) & same


def real_tokens(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """Boolean (batch, length): which of this forward's tokens are real (not padding). A real token may attend to
    itself, a pad may not: the diagonal of a 4D mask; a 2D mask's last `length` columns; everything without one."""
    if attention_mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    check_mask_type(attention_mask)
    if attention_mask.dim() == 4:
        return allowed_keys(attention_mask[..., :length].diagonal(dim1=-2, dim2=-1)).expand(batch, length)
    return attention_mask[:, -length:].bool()


def massive_token_positions(
    hidden: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None
) -> torch.Tensor:
    """Boolean (batch, length): the first real token of each sequence, plus every real token whose input norm
    exceeds MASSIVE_RATIO x the median norm of the real tokens it can see (itself included, its sequence's
    first token excluded, since that one is always masked and usually massive).

    The median looks only at tokens the token may attend to, so the choice is causal: a token's mask never
    depends on later tokens, and padding or other packed sequences never enter it.
    """
    batch, length = hidden.shape[:2]
    first = first_token_positions(attention_mask, position_ids, batch, length)
    real = real_tokens(attention_mask, batch, length, hidden.device)
    norms = torch.linalg.vector_norm(hidden.detach(), dim=-1, dtype=torch.float32)
    candidates = real & ~first
    # every median is one of the candidates' norms, so none can be exceeded 20x when the largest candidate norm
    # is within 20x of the smallest (or there is no candidate): then skip the (batch, length, length) median,
    # the usual case, with a handful of small operations
    largest = torch.where(candidates, norms, -torch.inf).amax()
    smallest = torch.where(candidates, norms, torch.inf).amin()
    if not bool(largest > MASSIVE_RATIO * smallest):
        return first
    visible = visible_keys(attention_mask, position_ids, batch, length).to(hidden.device)
    counted = visible & ~first[:, None, :]
    median = torch.empty(batch, length, device=hidden.device)
    step = max(1, MEDIAN_BLOCK // max(1, batch * length))
    for start in range(0, length, step):
        block = counted[:, start : start + step]
        values = torch.where(block, norms[:, None, :], torch.nan)
        median[:, start : start + step] = values.nanmedian(dim=-1).values
    massive = real & (norms > MASSIVE_RATIO * median)  # NaN medians (nothing else visible) compare False
    return first | massive
