"""Locate the ME layer (SPEC section 2): streaming per-layer statistics and the detection Decision.

Prompts stream through the decoder in padded batches; forward hooks reduce each layer's tensors to a few
numbers per prompt on the spot, so memory does not grow with the number of prompts. "First token" is each
prompt's first real token (from the attention mask), and position ids are derived from the mask, so a
batch gives the numbers of one prompt at a time whatever the padding side. Layer indices are 0-based.

Choices made here:
- ΔFrac: K = the top FRAC_SHARE (1%, at least 1) of dims by |w_eff| of the layer's pre-FFN norm.
- ΔKL: g is clamped at 1e-12, so a norm weight of exactly 0 gives a finite value.
- ΔC: on the outputs of the up and down projections and on the gate after its activation, g = act(W_gate h),
  read from the FFN's activation module (`act_fn`, or Phi-3's `activation_fn` on the gate half of its fused
  [gate | up] projection); NaN for an FFN without such a module.
- FFN branch: what the FFN adds to the residual stream, i.e. the post-FFN norm's output when the layer has
  one (Gemma), else the FFN's output. `ffn_share` = ||branch_0|| / ||layer output_0||.
- Attention-sink mass: the model runs with eager attention while measuring (restored afterwards); a hook
  reduces each layer's attention weights to one number per prompt (mean over heads and over queries after
  the first token of the weight on the first token) and drops them. Exact, and eager costs about what
  sdpa does at these lengths on a CPU.
- Residual sinks: dims with |h_i| >= SINK_RMS x RMS(h) on at least SINK_SHARE of the non-first tokens
  of the residual stream entering the pre-FFN norm, reported with both norms' w_eff at those dims.
- Aggregates over prompts are medians; first-vs-other metrics skip degenerate prompts (1 token, or one
  token repeated). NaN where a metric is undefined.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import WeMaskError
from .arch import LayerParts, base_model, resolve_layers
from .mask import masked_layers

FRAC_SHARE = 0.01
SINK_RMS = 6.0
SINK_SHARE = 0.5
JUMP = 8.0  # "about an order of magnitude": first/other ratio and step over the previous layer
PERSIST = 3  # layers after the jump that must keep it (fewer when the model ends sooner)
FFN_SHARE = 0.5  # the FFN branch must carry at least this share of the first token's output norm
RISE = 2.0  # an earlier rise: the first token grows >= 2x over the previous layer and is >= 2x the others

PER_PROMPT = (
    "first_norm", "other_norm", "max_abs", "max_token", "max_dim", "norm_magnification", "delta_frac", "delta_kl",
    "delta_c_up", "delta_c_gate", "delta_c_down", "ffn_magnification", "ffn_share", "sink_mass",
)  # fmt: skip
ACTIVATIONS = ("act_fn", "activation_fn")  # the FFN's act() module: Llama, Qwen, Mistral, Gemma; Phi-3
RELATIVE = {"other_norm", "norm_magnification", "delta_frac", "delta_kl", "delta_c_up", "delta_c_gate",
            "delta_c_down", "ffn_magnification", "sink_mass"}  # fmt: skip


# ---------------------------------------------------------------- metrics: pure functions on tensors


@dataclass(frozen=True)
class Tokens:
    """Which positions of a padded batch are real, and each row's first real position."""

    real: torch.Tensor  # (B, T) bool
    first: torch.Tensor  # (B,) long

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Tokens:
        real = attention_mask.bool()
        return cls(real=real, first=real.int().argmax(-1))

    @property
    def rest(self) -> torch.Tensor:
        """(B, T) bool: real tokens other than the first."""
        positions = torch.arange(self.real.shape[1], device=self.real.device)
        return self.real & (positions != self.first[:, None])


def first_value(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """values[b, first[b], ...] for each row b."""
    index = tokens.first.view(-1, *([1] * (values.dim() - 1))).expand(-1, 1, *values.shape[2:])
    return values.gather(1, index).squeeze(1)


def rest_mean(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """(B,) mean of (B, T) values over the non-first real tokens; NaN for a 1-token row."""
    rest = tokens.rest
    return torch.where(rest, values, 0).sum(-1) / rest.sum(-1)


def first_minus_rest(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    return first_value(values, tokens) - rest_mean(values, tokens)


def first_over_rest(values: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    return first_value(values, tokens) / rest_mean(values, tokens)


def frac_in_dims(h: torch.Tensor, dims: torch.Tensor) -> torch.Tensor:
    """Frac_t: the share of h_t's energy in `dims`."""
    energy = h.pow(2)
    return energy[..., dims].sum(-1) / energy.sum(-1)


def kl_to_scale(h: torch.Tensor, w_eff: torch.Tensor) -> torch.Tensor:
    """KL(p_t || g) with p_t = h_t^2 / sum h_t^2 and g = w_eff^2 / sum w_eff^2 (g clamped at 1e-12)."""
    p = h.pow(2) / h.pow(2).sum(-1, keepdim=True)
    g = (w_eff.pow(2) / w_eff.pow(2).sum()).clamp_min(1e-12)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, g)).sum(-1)


def concentration(v: torch.Tensor) -> torch.Tensor:
    """Inverse participation ratio C(v) = sum_i (v_i^2 / sum_j v_j^2)^2: 1/d when spread evenly, 1 on one dim."""
    q = v.pow(2) / v.pow(2).sum(-1, keepdim=True)
    return q.pow(2).sum(-1)


def sink_mass(weights: torch.Tensor, tokens: Tokens) -> torch.Tensor:
    """(B,) mean attention weight on the first real token, over heads and the real queries after it."""
    index = tokens.first.view(-1, 1, 1, 1).expand(-1, weights.shape[1], weights.shape[2], 1)
    on_first = weights.gather(3, index).squeeze(3).mean(1)  # (B, T queries)
    return rest_mean(on_first, tokens)


def mean_pairwise_cosine(unit_sum: torch.Tensor, count: int) -> torch.Tensor:
    """Mean cosine over distinct pairs of `count` unit vectors from their sum: (|sum|^2 - n) / (n (n - 1))."""
    if count < 2:
        return torch.full(unit_sum.shape[:-1], math.nan)
    return (unit_sum.pow(2).sum(-1) - count) / (count * (count - 1))


def largest_activation(h: torch.Tensor, tokens: Tokens) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B,) largest |h| over real tokens, its token (counted from the first real token) and its dim."""
    magnitude = torch.where(tokens.real[..., None], h.abs(), -1.0).flatten(1)
    value, flat = magnitude.max(-1)
    token, dim = flat // h.shape[-1], flat % h.shape[-1]
    return value, token - tokens.first, dim


def sink_hits(h: torch.Tensor, mask: torch.Tensor, threshold: float = SINK_RMS) -> tuple[torch.Tensor, torch.Tensor]:
    """(d,) how many masked tokens have |h_i| >= threshold x RMS(h_t), and (d,) the sum of |h_i| / RMS(h_t)."""
    scaled = h.abs() / h.pow(2).mean(-1, keepdim=True).sqrt()
    scaled = scaled[mask]
    return (scaled >= threshold).sum(0), scaled.sum(0)


# ---------------------------------------------------------------- streaming collection with hooks


@dataclass
class PromptStats:
    """Per-prompt, per-layer numbers and cross-prompt running sums; no hidden state is kept."""

    values: dict[str, torch.Tensor]  # name -> (N, L) float64
    input_first_norm: torch.Tensor  # (N,) the first token's norm entering layer 0
    lengths: torch.Tensor  # (N,) real tokens per prompt
    degenerate: torch.Tensor  # (N,) bool: one token, or one token repeated
    unit_sum: torch.Tensor  # (L, d) sum over prompts of the first token's unit output state
    sink_count: torch.Tensor  # (L, d) non-first tokens with |h_i| >= SINK_RMS x RMS(h)
    sink_scale: torch.Tensor  # (L, d) sum over non-first tokens of |h_i| / RMS(h)
    other_tokens: int = 0

    @classmethod
    def empty(cls, prompts: int, layers: int, d: int) -> PromptStats:
        return cls(
            values={name: torch.full((prompts, layers), math.nan, dtype=torch.float64) for name in PER_PROMPT},
            input_first_norm=torch.full((prompts,), math.nan, dtype=torch.float64),
            lengths=torch.zeros(prompts, dtype=torch.long),
            degenerate=torch.zeros(prompts, dtype=torch.bool),
            unit_sum=torch.zeros(layers, d, dtype=torch.float64),
            sink_count=torch.zeros(layers, d, dtype=torch.float64),
            sink_scale=torch.zeros(layers, d, dtype=torch.float64),
        )


class Recorder:
    """Forward hooks on every layer that reduce one batch at a time into a PromptStats."""

    def __init__(self, parts: Sequence[LayerParts], stats: PromptStats, frac_share: float = FRAC_SHARE):
        self.parts = parts
        self.stats = stats
        self.ffn_w = [part.ffn_scale() for part in parts]
        k = max(1, math.ceil(frac_share * self.ffn_w[0].numel()))
        self.frac_dims = [torch.topk(w.abs(), k).indices for w in self.ffn_w]
        self.rows: torch.Tensor | None = None
        self.tokens: Tokens | None = None
        self.normed: dict[int, torch.Tensor] = {}  # within one forward: ||ĥ_t|| per layer
        self.branch: dict[int, torch.Tensor] = {}  # within one forward: ||branch_t|| per layer

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        handles = [self.parts[0].layer.register_forward_pre_hook(self.on_input, with_kwargs=True)]
        for part in self.parts:
            l = part.index
            handles.append(part.attention.register_forward_hook(lambda _m, _i, out, l=l: self.on_attention(l, out)))
            handles.append(part.ffn_norm.register_forward_hook(lambda _m, i, out, l=l: self.on_ffn_norm(l, i[0], out)))
            measured = {role: m for role, m in part.ffn_projections().items() if role != "gate"}
            activation = ffn_activation(part.ffn)
            if activation is not None:  # the gate is measured after its activation
                measured["gate"] = activation
            for role, module in measured.items():
                handles.append(module.register_forward_hook(lambda _m, _i, out, l=l, r=role: self.on_projection(l, r, out)))
            branch = part.post_ffn_norm if part.post_ffn_norm is not None else part.ffn
            handles.append(branch.register_forward_hook(lambda _m, _i, out, l=l: self.on_branch(l, out)))
            handles.append(part.layer.register_forward_hook(lambda _m, _i, out, l=l: self.on_output(l, out)))
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def put(self, name: str, layer: int, values: torch.Tensor) -> None:
        self.stats.values[name][self.rows, layer] = values.detach().double().cpu()

    def on_input(self, _module, args, kwargs) -> None:
        h = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).float()
        self.stats.input_first_norm[self.rows] = first_value(h.norm(dim=-1), self.tokens).double().cpu()

    def on_attention(self, l: int, out) -> None:
        weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        if isinstance(weights, torch.Tensor) and weights.dim() == 4:
            self.put("sink_mass", l, sink_mass(weights.float(), self.tokens))

    def on_ffn_norm(self, l: int, residual: torch.Tensor, normed: torch.Tensor) -> None:
        h, residual = normed.float(), residual.float()
        norms = h.norm(dim=-1)
        self.normed[l] = norms
        self.put("norm_magnification", l, first_over_rest(norms, self.tokens))
        self.put("delta_frac", l, first_minus_rest(frac_in_dims(h, self.frac_dims[l].to(h.device)), self.tokens))
        self.put("delta_kl", l, first_minus_rest(kl_to_scale(h, self.ffn_w[l].to(h.device)), self.tokens))
        count, scale = sink_hits(residual, self.tokens.rest)
        self.stats.sink_count[l] += count.double().cpu()
        self.stats.sink_scale[l] += scale.double().cpu()
        if l == 0:
            self.stats.other_tokens += int(self.tokens.rest.sum())

    def on_projection(self, l: int, role: str, out: torch.Tensor) -> None:
        """ΔC of an up/down projection's output, of act(gate) for role 'gate', or of the up half of a fused gate_up."""
        if role == "gate_up":
            role, out = "up", out.chunk(2, dim=-1)[1]
        self.put(f"delta_c_{role}", l, first_minus_rest(concentration(out.float()), self.tokens))

    def on_branch(self, l: int, out) -> None:
        norms = (out[0] if isinstance(out, tuple) else out).float().norm(dim=-1)
        self.branch[l] = norms
        self.put("ffn_magnification", l, first_over_rest(norms / self.normed[l], self.tokens))

    def on_output(self, l: int, out) -> None:
        h = (out[0] if isinstance(out, tuple) else out).float()
        norms = h.norm(dim=-1)
        first = first_value(norms, self.tokens)
        self.put("first_norm", l, first)
        self.put("other_norm", l, rest_mean(norms, self.tokens))
        self.put("ffn_share", l, first_value(self.branch[l], self.tokens) / first)
        value, token, dim = largest_activation(h, self.tokens)
        self.put("max_abs", l, value)
        self.put("max_token", l, token)
        self.put("max_dim", l, dim)
        unit = first_value(h, self.tokens)
        self.stats.unit_sum[l] += (unit / unit.norm(dim=-1, keepdim=True)).sum(0).double().cpu()


def ffn_activation(ffn: nn.Module) -> nn.Module | None:
    """The module that applies act() to the FFN's gate projection, or None."""
    return next((m for name in ACTIVATIONS if isinstance(m := getattr(ffn, name, None), nn.Module)), None)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Run with eager attention (whose modules return their weights), restoring the implementation after."""
    base = base_model(model)
    config = getattr(base, "config", None)
    before = getattr(config, "_attn_implementation", None)
    setter = getattr(base, "set_attn_implementation", None)
    if before in (None, "eager") or not callable(setter):
        yield
        return
    setter("eager")
    try:
        yield
    finally:
        setter(before)


def is_degenerate(ids: Sequence[int]) -> bool:
    """One token, or one token repeated: no 'other' tokens to compare the first one with."""
    return len(set(ids)) <= 1


def batches(token_ids: Sequence[Sequence[int]], batch_size: int) -> Iterator[list[int]]:
    """Prompt indices in batches of similar length (less padding); every index once."""
    order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def pad(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) padded on `side`."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[b, span] = torch.tensor(row, dtype=torch.long)
        mask[b, span] = 1
    return ids, mask


@torch.no_grad()
def collect_stats(
    model: nn.Module,
    token_ids: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    pad_id: int = 0,
    padding_side: str = "right",
    progress: Callable[[int], None] | None = None,
) -> PromptStats:
    """Stream the prompts (lists of token ids, each non-empty) through the decoder; return their statistics."""
    parts = resolve_layers(model)
    stats = PromptStats.empty(len(token_ids), len(parts), parts[0].ffn_scale().numel())
    stats.lengths = torch.tensor([len(ids) for ids in token_ids])
    stats.degenerate = torch.tensor([is_degenerate(ids) for ids in token_ids], dtype=torch.bool)
    decoder = base_model(model).get_decoder()
    device = next(model.parameters()).device
    recorder = Recorder(parts, stats)
    with eager_attention(model), recorder.installed():
        for rows in batches(token_ids, batch_size):
            ids, mask = pad([token_ids[i] for i in rows], pad_id, padding_side)
            ids, mask = ids.to(device), mask.to(device)
            recorder.rows = torch.tensor(rows)
            recorder.tokens = Tokens.from_mask(mask)
            positions = (mask.cumsum(-1) - 1).clamp_min(0)
            decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
            recorder.normed.clear()
            recorder.branch.clear()
            if progress is not None:
                progress(len(rows))
    return stats


# ---------------------------------------------------------------- detection (SPEC section 2, Decision)


def steps(first_norm: torch.Tensor, input_first_norm: torch.Tensor) -> torch.Tensor:
    """(..., L) the first token's norm over its norm entering the layer."""
    previous = torch.cat([input_first_norm[..., None], first_norm[..., :-1]], -1)
    return first_norm / previous


def detect_prompt(
    first_norm: torch.Tensor,
    other_norm: torch.Tensor,
    ffn_share: torch.Tensor,
    input_first_norm: float,
    degenerate: bool,
) -> int | None:
    """The first layer where the first token's norm steps up >= JUMP x over the previous layer and ends >= JUMP x
    the other tokens', written by the FFN branch, and stays up for PERSIST layers; None if there is none.

    A degenerate prompt has no other tokens to compare with: only the absolute step counts, and not at
    layer 0 (its step from the embeddings says nothing about emergence).
    """
    n = first_norm.numel()
    step = steps(first_norm, torch.tensor(input_first_norm, dtype=first_norm.dtype))
    ratio = first_norm / other_norm
    for l in range(n - 1):
        if step[l] < JUMP or not ffn_share[l] >= FFN_SHARE or (degenerate and l == 0):
            continue
        if not degenerate and not ratio[l] >= JUMP:
            continue
        after = range(l + 1, min(n, l + 1 + PERSIST))
        if all(first_norm[j] >= first_norm[l] / 2 and (degenerate or ratio[j] >= JUMP / 2) for j in after):
            return l
    return None


@dataclass
class Detection:
    """The located ME layer (None: no massive activation found), how the prompts voted, and why."""

    me_layer: int | None
    agree: int
    total: int
    per_prompt: list[int | None]
    step: float | None = None  # median over the agreeing prompts: first-token norm / previous layer's
    ratio: float | None = None  # median over the agreeing non-degenerate prompts: first-token norm / other tokens' mean
    ffn_share: float | None = None  # median over the agreeing prompts: ||FFN branch_0|| / ||output_0||
    earlier_rises: list[dict] = field(default_factory=list)

    @property
    def confidence(self) -> float:
        return self.agree / self.total if self.total else 0.0


def detect(stats: PromptStats) -> Detection:
    """Detect per prompt, then take the layer a strict majority of prompts agree on."""
    votes = [
        detect_prompt(
            stats.values["first_norm"][i],
            stats.values["other_norm"][i],
            stats.values["ffn_share"][i],
            float(stats.input_first_norm[i]),
            bool(stats.degenerate[i]),
        )
        for i in range(len(stats.lengths))
    ]
    counts = Counter(v for v in votes if v is not None)
    layer, agree = counts.most_common(1)[0] if counts else (None, 0)
    if 2 * agree <= len(votes):
        layer = None
    all_steps = steps(stats.values["first_norm"], stats.input_first_norm)
    ratios = stats.values["first_norm"] / stats.values["other_norm"]
    valid = ~stats.degenerate
    median_step, median_ratio = nanmedian(all_steps), nanmedian(ratios[valid])
    stop = layer if layer is not None else all_steps.shape[1]
    rises = [
        {"layer": l, "step": float(median_step[l]), "first_over_other": float(median_ratio[l])}
        for l in range(stop)
        if median_step[l] >= RISE and median_ratio[l] >= RISE
    ]
    detection = Detection(layer, agree if layer is not None else 0, len(votes), votes, earlier_rises=rises)
    if layer is not None:
        agreeing = torch.tensor([v == layer for v in votes])
        detection.step = float(all_steps[agreeing, layer].median())
        detection.ratio = plain(nanmedian(ratios[agreeing & valid])[layer])  # None when only degenerate prompts agree
        detection.ffn_share = float(stats.values["ffn_share"][agreeing, layer].median())
    return detection


def nanmedian(values: torch.Tensor) -> torch.Tensor:
    """(L,) median over prompts, ignoring NaN (NaN when a column has no value)."""
    if values.shape[0] == 0:
        return torch.full(values.shape[1:], math.nan, dtype=values.dtype)
    return values.nanmedian(0).values


# ---------------------------------------------------------------- per-layer summary


def residual_sinks(stats: PromptStats, parts: Sequence[LayerParts], layer: int) -> list[dict]:
    """Dims large (>= SINK_RMS x RMS) on at least SINK_SHARE of the non-first tokens at this layer's pre-FFN norm."""
    if stats.other_tokens == 0:
        return []
    share = stats.sink_count[layer] / stats.other_tokens
    dims = torch.nonzero(share >= SINK_SHARE).flatten().tolist()
    ffn_w, attn_w = parts[layer].ffn_scale(), parts[layer].attn_scale()
    sinks = [
        {
            "dim": d,
            "token_share": float(share[d]),
            "mean_abs_over_rms": float(stats.sink_scale[layer, d] / stats.other_tokens),
            "ffn_norm_weight": float(ffn_w[d]),
            "attn_norm_weight": float(attn_w[d]),
        }
        for d in dims
    ]
    return sorted(sinks, key=lambda s: -s["mean_abs_over_rms"])


def layer_records(stats: PromptStats, parts: Sequence[LayerParts]) -> list[dict]:
    """One record per layer: medians over prompts (first-vs-other metrics over non-degenerate prompts)."""
    valid = ~stats.degenerate
    medians = {
        name: nanmedian(values[valid] if name in RELATIVE else values)
        for name, values in stats.values.items()
        if not name.startswith("max_")
    }
    step = nanmedian(steps(stats.values["first_norm"], stats.input_first_norm))
    ratio = nanmedian((stats.values["first_norm"] / stats.values["other_norm"])[valid])
    cosine = mean_pairwise_cosine(stats.unit_sum, len(stats.lengths))
    strongest = stats.values["max_abs"].argmax(0)
    records = []
    for l, part in enumerate(parts):
        at = int(strongest[l])
        ffn_w = part.ffn_scale()
        record = {"layer": l, "first_norm": medians["first_norm"][l], "other_norm": medians["other_norm"][l]}
        record["first_over_other"] = ratio[l]
        record["step"] = step[l]
        record["max_abs"] = stats.values["max_abs"][at, l]
        record["max_abs_prompt"] = at
        record["max_abs_token"] = int(stats.values["max_token"][at, l])
        record["max_abs_dim"] = int(stats.values["max_dim"][at, l])
        for name in ("norm_magnification", "delta_frac", "delta_kl", "delta_c_up", "delta_c_gate", "delta_c_down",
                     "ffn_magnification", "ffn_share", "sink_mass"):  # fmt: skip
            record[name] = medians[name][l]
        record["first_token_cosine"] = cosine[l]
        record["ffn_norm_weight_mean_abs"] = ffn_w.abs().mean()
        record["residual_sinks"] = residual_sinks(stats, parts, l)
        records.append({key: plain(value) for key, value in record.items()})
    return records


def plain(value):
    """A JSON-ready number: Python int/float, NaN as None."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    return value


@dataclass
class LocateResult:
    stats: PromptStats
    detection: Detection
    layers: list[dict]


def locate(model: nn.Module, token_ids: Sequence[Sequence[int]], **collect) -> LocateResult:
    """Collect the statistics of these prompts and detect the ME layer (keyword args go to collect_stats)."""
    if masked_layers(model):
        raise WeMaskError("the model carries WeMask hooks: locating needs the unmasked model, remove them first")
    stats = collect_stats(model, token_ids, **collect)
    return LocateResult(stats, detect(stats), layer_records(stats, resolve_layers(model)))
