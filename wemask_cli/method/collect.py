"""Streaming per-layer statistics for locating the ME layer (SPEC section 2).

Prompts stream through the decoder in padded batches; forward hooks reduce each layer's tensors to a few
numbers per prompt on the spot, so memory does not grow with the number of prompts. Position ids are derived
from the attention mask, so a batch gives the numbers of one prompt at a time whatever the padding side.
Layer indices are 0-based.

Choices made here:
- ΔFrac: K = the top FRAC_SHARE (1%, at least 1) of dims by |w_eff| of the layer's pre-FFN norm.
- ΔKL: g is clamped at 1e-12, so a norm weight of exactly 0 gives a finite value.
- ΔC: on the outputs of the up and down projections and on the gate after its activation, g = act(W_gate h),
  read from the FFN's activation module (`act_fn`, or Phi-3's `activation_fn` on the gate half of its fused
  [gate | up] projection); NaN for an FFN without such a module. An MoE block: see moe.py (the first token's
  experts plus any shared expert).
- ĥ is the FFN's input: the pre-FFN norm's output, or the residual stream itself in a post-norm layer
  (OLMo-2), where ΔFrac and ΔKL, which need the pre-FFN norm's weight, are NaN.
- FFN branch: what the FFN adds to the residual stream, i.e. the post-FFN norm's output when the layer has
  one (Gemma, OLMo-2), else the FFN's output. `ffn_share` = ||branch_0|| / ||layer output_0||; likewise
  `attn_share` (after the post-attention norm where there is one), and for an MoE block `routed_share` (the
  routed experts' weighted sum) and `shared_share` (the rest of the block's output: the gated shared expert).
- Attention-sink mass: the model runs with eager attention while measuring (restored afterwards); a hook
  reduces each layer's attention weights to one number per prompt (mean over heads and over queries after
  the first token of the weight on the first token) and drops them. Exact, and eager costs about what
  sdpa does at these lengths on a CPU. `sink_position`: the key position (0 = the first real token) with the most
  attention over heads and the queries after the first token, per prompt (where the sink lands).
- Residual sinks: per-dim counts of non-first tokens with |h_i| >= SINK_RMS x RMS(h) of the residual stream
  entering the pre-FFN norm (summarised in locate.residual_sinks).
- Some batches only (`shares`, shares.py): the running sums are kept per batch (`BatchSums`) and
  `PromptStats.merge` adds them in batch order, so the joined statistics equal one run's bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from wemask_cli.compat.transformers import attn_implementation
from wemask_cli.method.arch import LayerParts, base_model, hidden_size, resolve_layers
from wemask_cli.method.batch import pad, positions_of
from wemask_cli.method.metrics import (
    Tokens,
    concentration,
    first_minus_rest,
    first_over_rest,
    first_value,
    frac_in_dims,
    kl_to_scale,
    largest_activation,
    rest_mean,
    sink_hits,
    sink_mass,
    sink_position,
)
from wemask_cli.method.moe import chosen_outputs, experts_call
from wemask_cli.method.shares import Shares

FRAC_SHARE = 0.01

PER_PROMPT = (
    "first_norm", "other_norm", "max_abs", "max_token", "max_dim", "norm_magnification", "delta_frac", "delta_kl",
    "delta_c_up", "delta_c_gate", "delta_c_down", "ffn_magnification", "ffn_share", "sink_mass",
    "attn_share", "routed_share", "shared_share", "sink_position",
)  # fmt: skip
ACTIVATIONS = ("act_fn", "activation_fn")  # the FFN's act() module: Llama, Qwen, Mistral, Gemma; Phi-3


@dataclass
class BatchSums:
    """One batch's share of PromptStats' running sums (its prompts: `rows`)."""

    rows: list[int]
    unit_sum: torch.Tensor
    sink_count: torch.Tensor
    sink_scale: torch.Tensor
    other_tokens: int = 0

    @classmethod
    def empty(cls, rows: list[int], layers: int, d: int) -> BatchSums:
        return cls(list(rows), *(torch.zeros(layers, d, dtype=torch.float64) for _ in range(3)))

    def add_to(self, stats: PromptStats) -> None:
        stats.unit_sum += self.unit_sum
        stats.sink_count += self.sink_count
        stats.sink_scale += self.sink_scale
        stats.other_tokens += self.other_tokens


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
    first_experts: dict[int, torch.Tensor] = field(default_factory=dict)  # MoE layer -> (N, k) first token's experts
    per_batch: dict[int, BatchSums] | None = None  # some batches only (Shares): batch k's sums, not yet added

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

    @classmethod
    def merge(cls, parts: list[PromptStats]) -> PromptStats:
        """The statistics of all the prompts from parts that measured some batches each: every prompt's values from
        the part that measured it, the sums added batch by batch in batch order (as one run adds them)."""
        batches = {k: (part, sums) for part in parts for k, sums in part.per_batch.items()}
        merged = cls.empty(*parts[0].values["first_norm"].shape, parts[0].unit_sum.shape[1])
        merged.lengths, merged.degenerate = parts[0].lengths, parts[0].degenerate
        for k in sorted(batches):
            part, sums = batches[k]
            rows = torch.tensor(sums.rows, dtype=torch.long)
            for name, values in part.values.items():
                merged.values[name][rows] = values[rows]
            merged.input_first_norm[rows] = part.input_first_norm[rows]
            for layer, experts in part.first_experts.items():
                merged.first_experts.setdefault(layer, torch.full_like(experts, -1))[rows] = experts[rows]
            sums.add_to(merged)
        return merged


class Recorder:
    """Forward hooks on every layer that reduce one batch at a time into a PromptStats."""

    def __init__(self, parts: Sequence[LayerParts], stats: PromptStats, frac_share: float = FRAC_SHARE):
        self.parts = parts
        self.stats = stats
        self.ffn_w = [part.ffn_scale() for part in parts]
        k = max(1, math.ceil(frac_share * hidden_size(parts)))
        self.frac_dims = [None if w is None else torch.topk(w.abs(), k).indices for w in self.ffn_w]
        self.rows: torch.Tensor | None = None
        self.tokens: Tokens | None = None
        self.sums: PromptStats | BatchSums = stats  # where this batch's running sums go
        self.normed: dict[int, torch.Tensor] = {}  # within one forward: ||ĥ_t|| per layer
        self.branch: dict[int, torch.Tensor] = {}  # within one forward: ||branch_t|| per layer
        self.branches: dict[tuple[int, str], torch.Tensor] = {}  # within one forward: attn/routed/shared norms
        self.routed: dict[int, torch.Tensor] = {}  # within one forward: an MoE block's routed output, shared ones

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        handles = [self.parts[0].layer.register_forward_pre_hook(self.on_input, with_kwargs=True)]
        for part in self.parts:
            handles.extend(self.layer_hooks(part))
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def layer_hooks(self, part: LayerParts) -> list:
        """The forward hooks that reduce one layer's tensors (its norms, branches and FFN projections)."""
        l = part.index
        handles = [part.attention.register_forward_hook(lambda _m, _i, out: self.on_attention(l, out))]
        if part.post_attn_norm is not None:
            handles.append(part.post_attn_norm.register_forward_hook(lambda _m, _i, out: self.keep(l, "attn", out)))
        if part.ffn_norm is not None:
            handles.append(part.ffn_norm.register_forward_hook(lambda _m, i, out: self.on_ffn_norm(l, i[0], out)))
        else:  # post-norm: the FFN reads the residual stream itself
            handles.append(part.ffn.register_forward_pre_hook(lambda _m, i: self.on_ffn_norm(l, i[0], i[0])))
        measured = {role: m for role, m in part.ffn_projections().items() if role != "gate"}
        activation = ffn_activation(part.ffn)
        if activation is not None:  # the gate is measured after its activation
            measured["gate"] = activation
        for role, module in measured.items():
            handles.append(module.register_forward_hook(lambda _m, _i, out, r=role: self.on_projection(l, r, out)))
        if part.experts is not None:
            handles.append(part.experts.register_forward_hook(
                lambda _m, args, kwargs, out: self.on_experts(part, args, kwargs, out), with_kwargs=True))  # fmt: skip
        branch = part.post_ffn_norm if part.post_ffn_norm is not None else part.ffn
        handles.append(branch.register_forward_hook(lambda _m, _i, out: self.on_branch(l, out)))
        handles.append(part.layer.register_forward_hook(lambda _m, _i, out: self.on_output(l, out)))
        return handles

    def keep(self, l: int, branch: str, out) -> None:
        """Hold a branch's per-token norms until the layer's output is known."""
        self.branches[l, branch] = (out[0] if isinstance(out, tuple) else out).float().norm(dim=-1)

    def put(self, name: str, layer: int, values: torch.Tensor) -> None:
        self.stats.values[name][self.rows, layer] = values.detach().double().cpu()

    def on_input(self, _module, args, kwargs) -> None:
        h = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).float()
        self.stats.input_first_norm[self.rows] = first_value(h.norm(dim=-1), self.tokens).double().cpu()

    def on_attention(self, l: int, out) -> None:
        if self.parts[l].post_attn_norm is None:
            self.keep(l, "attn", out)
        weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        if isinstance(weights, torch.Tensor) and weights.dim() == 4:
            self.put("sink_mass", l, sink_mass(weights.float(), self.tokens))
            self.put("sink_position", l, sink_position(weights.float(), self.tokens))

    def on_ffn_norm(self, l: int, residual: torch.Tensor, normed: torch.Tensor) -> None:
        h, residual = normed.float(), residual.float()
        norms = h.norm(dim=-1)
        self.normed[l] = norms
        self.put("norm_magnification", l, first_over_rest(norms, self.tokens))
        if self.ffn_w[l] is not None:
            self.put("delta_frac", l, first_minus_rest(frac_in_dims(h, self.frac_dims[l].to(h.device)), self.tokens))
            self.put("delta_kl", l, first_minus_rest(kl_to_scale(h, self.ffn_w[l].to(h.device)), self.tokens))
        count, scale = sink_hits(residual, self.tokens.rest)
        self.sums.sink_count[l] += count.double().cpu()
        self.sums.sink_scale[l] += scale.double().cpu()
        if l == 0:
            self.sums.other_tokens += int(self.tokens.rest.sum())

    def on_projection(self, l: int, role: str, out: torch.Tensor) -> None:
        """ΔC of an up/down projection's output, of act(gate) for role 'gate', or of the up half of a fused gate_up."""
        if role == "gate_up":
            role, out = "up", out.chunk(2, dim=-1)[1]
        self.put(f"delta_c_{role}", l, first_minus_rest(concentration(out.float()), self.tokens))

    def on_experts(self, part: LayerParts, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        """An MoE block's routed experts: the first token's choice, ΔC on its experts (moe.py), the routed norms."""
        hidden, index = experts_call(args, kwargs)
        rows, length = self.tokens.real.shape
        hidden, index = hidden.view(rows, length, -1), index.view(rows, length, -1)
        chosen = first_value(index, self.tokens)
        self.stats.first_experts.setdefault(
            part.index, torch.full((len(self.stats.lengths), chosen.shape[-1]), -1, dtype=torch.long)
        )[self.rows] = chosen.cpu()
        routed = out.float().view(rows, length, -1)
        self.branches[part.index, "routed"] = routed.norm(dim=-1)
        if part.shared_experts is not None and part.post_ffn_norm is None:
            self.routed[part.index] = routed  # the block's output less this is the shared expert's
        outputs = [chosen_outputs(part.experts, part.shared_experts, hidden[b], chosen[b]) for b in range(rows)]
        for role in set.intersection(*(set(o) for o in outputs)):
            values = torch.stack([concentration(o[role].float()) for o in outputs])
            self.put(f"delta_c_{role}", part.index, first_minus_rest(values, self.tokens))

    def on_branch(self, l: int, out) -> None:
        out = (out[0] if isinstance(out, tuple) else out).float()
        norms = out.norm(dim=-1)
        self.branch[l] = norms
        if l in self.routed:
            self.branches[l, "shared"] = (out - self.routed.pop(l)).norm(dim=-1)
        self.put("ffn_magnification", l, first_over_rest(norms / self.normed[l], self.tokens))

    def on_output(self, l: int, out) -> None:
        h = (out[0] if isinstance(out, tuple) else out).float()
        norms = h.norm(dim=-1)
        first = first_value(norms, self.tokens)
        self.put("first_norm", l, first)
        self.put("other_norm", l, rest_mean(norms, self.tokens))
        self.put("ffn_share", l, first_value(self.branch[l], self.tokens) / first)
        self.put("attn_share", l, first_value(self.branches[l, "attn"], self.tokens) / first)
        for branch in ("routed", "shared"):
            if (l, branch) in self.branches:
                self.put(f"{branch}_share", l, first_value(self.branches[l, branch], self.tokens) / first)
        value, token, dim = largest_activation(h, self.tokens)
        self.put("max_abs", l, value)
        self.put("max_token", l, token)
        self.put("max_dim", l, dim)
        unit = first_value(h, self.tokens)
        self.sums.unit_sum[l] += (unit / unit.norm(dim=-1, keepdim=True)).sum(0).double().cpu()


def ffn_activation(ffn: nn.Module) -> nn.Module | None:
    """The module that applies act() to the FFN's gate projection, or None."""
    return next((m for name in ACTIVATIONS if isinstance(m := getattr(ffn, name, None), nn.Module)), None)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Run with eager attention (whose modules return their weights), restoring the implementation after."""
    base = base_model(model)
    config = getattr(base, "config", None)
    before = attn_implementation(config)
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


@torch.no_grad()
def collect_stats(
    model: nn.Module,
    token_ids: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    pad_id: int = 0,
    padding_side: str = "right",
    progress: Callable[[int], None] | None = None,
    shares: Shares | None = None,
) -> PromptStats:
    """Stream the prompts (lists of token ids, each non-empty) through the decoder; return their statistics (with
    `shares`: this worker's batches, joined with the others' into those of all the prompts)."""
    parts = resolve_layers(model)
    stats = PromptStats.empty(len(token_ids), len(parts), hidden_size(parts))
    stats.lengths = torch.tensor([len(ids) for ids in token_ids])
    stats.degenerate = torch.tensor([is_degenerate(ids) for ids in token_ids], dtype=torch.bool)
    stats.per_batch = None if shares is None else {}
    recorder = Recorder(parts, stats)

    def start(k: int, rows: list[int], mask: torch.Tensor) -> None:
        recorder.rows, recorder.tokens = torch.tensor(rows), Tokens.from_mask(mask)
        if shares is not None:
            recorder.sums = stats.per_batch[k] = BatchSums.empty(rows, len(parts), hidden_size(parts))
        recorder.normed.clear()
        recorder.branch.clear()
        recorder.branches.clear()

    with recorder.installed():
        ran = run_batches(model, token_ids, start, batch_size=batch_size, pad_id=pad_id, padding_side=padding_side,
                          progress=progress, runs=shares and shares.runs)
    return stats if shares is None else shares.join(stats, progress, len(token_ids) - ran)


def run_batches(model: nn.Module, token_ids: Sequence[Sequence[int]],
                start: Callable[[int, list[int], torch.Tensor], None], *, batch_size: int, pad_id: int,
                padding_side: str, progress: Callable[[int], None] | None,
                runs: Callable[[int], bool] | None = None) -> int:
    """The prompts through the decoder in padded batches with eager attention; `start(k, rows, mask)` before each
    forward (the batch's number, its prompts' indices, its attention mask), `progress(n)` after it. `runs(k)`: whether
    batch k runs here (every batch without it). Returns how many prompts ran."""
    decoder = base_model(model).get_decoder()
    device = next(model.parameters()).device
    ran = 0
    with eager_attention(model):
        for k, rows in enumerate(batches(token_ids, batch_size)):
            if runs is not None and not runs(k):
                continue
            ids, mask = pad([token_ids[i] for i in rows], pad_id, padding_side)
            ids, mask = ids.to(device), mask.to(device)
            start(k, rows, mask)
            decoder(input_ids=ids, attention_mask=mask, position_ids=positions_of(mask), use_cache=False)
            ran += len(rows)
            if progress is not None:
                progress(len(rows))
    return ran
