"""Mixture-of-experts FFNs: one expert's projections, the first token's routing, and who writes the jump.

transformers 5 keeps a block's experts as 3D tensors `gate_up_proj` (or `up_proj`) and `down_proj`, with the
flags `use_experts_implementation` sets: `is_transposed` ((E, in, out) rather than (E, out, in)),
`is_concatenated` ([gate | up] halves, else interleaved gate0, up0, ...), `has_bias`, `has_gate`; the block
calls experts(hidden (T, d), top_k_index (T, k), top_k_weights (T, k)), so the router's choice is read from
that call whatever the router's own form.

Choices made here:
- ΔC of an MoE block: on the experts the router chose for the first token (each prompt's own), plus the
  shared expert(s) when the block has them; C of a token is taken on the concatenation of those experts'
  outputs after up, act(gate) and down, for the first token and for every other token alike (same experts, so
  the comparison is on the same weights). act(gate) needs the experts' `act_fn` (gpt-oss has its own clamped
  GLU and none): NaN without it, as for a dense FFN.
- Routing concentration at a layer: the share of prompts whose first token goes to the most common expert
  set, and each expert's share of prompts (an expert counts once per prompt).
- The jump's writer at the ME layer: the branch with the largest share ||branch_0|| / ||output_0|| among
  attention, routed experts and shared expert (attention and FFN for a dense layer).
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from wemask_cli.compat.transformers import apply_expert_gate

ROLES = ("up", "gate", "down")


def expert_linear(x: torch.Tensor, experts: nn.Module, name: str, expert: int) -> torch.Tensor:
    weight = getattr(experts, name)[expert]
    out = x @ weight if getattr(experts, "is_transposed", False) else x @ weight.T
    bias = getattr(experts, f"{name}_bias", None) if getattr(experts, "has_bias", False) else None
    return out if bias is None else out + bias[expert]


def expert_projections(experts: nn.Module, expert: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Expert `expert`'s outputs on x (T, d): after up, act(gate) (when it has an `act_fn`) and down."""
    act = getattr(experts, "act_fn", None)
    out = {}
    if getattr(experts, "has_gate", True):
        both = expert_linear(x, experts, "gate_up_proj", expert)
        if getattr(experts, "is_concatenated", True):
            gate, out["up"] = both.chunk(2, dim=-1)
        else:
            gate, out["up"] = both[..., ::2], both[..., 1::2]
        if callable(act):
            out["gate"] = act(gate)
        hidden = apply_expert_gate(experts, both)
    else:
        out["up"] = expert_linear(x, experts, "up_proj", expert)
        hidden = act(out["up"])
    out["down"] = expert_linear(hidden, experts, "down_proj", expert)
    return out


def dense_projections(mlp: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """A shared expert's (a gated MLP's) outputs on x after up, act(gate) and down."""
    return {"up": mlp.up_proj(x), "gate": mlp.act_fn(mlp.gate_proj(x)), "down": mlp(x)}


def experts_call(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden (T, d), top_k_index (T, k)) from a call of an experts module."""
    hidden = args[0] if args else kwargs["hidden_states"]
    index = args[1] if len(args) > 1 else next(kwargs[k] for k in ("top_k_index", "router_indices") if k in kwargs)
    return hidden, index


def chosen_outputs(
    experts: nn.Module, shared: nn.Module | None, x: torch.Tensor, chosen: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per role, the concatenated outputs (S, *) of the `chosen` experts and the shared expert on one row x (S, d);
    a role some of them lack is left out."""
    pieces = [expert_projections(experts, int(e), x) for e in chosen]
    if shared is not None:
        pieces.append(dense_projections(shared, x))
    return {role: torch.cat([p[role] for p in pieces], -1) for role in ROLES if all(role in p for p in pieces)}


def routing_summary(first_experts: torch.Tensor, used: torch.Tensor) -> dict:
    """(N, k) expert ids of each prompt's first token at one layer, over the prompts `used`: the concentration."""
    sets = [tuple(sorted(row)) for row in first_experts[used].tolist()]
    if not sets:
        return {"prompts": 0, "experts": [], "modal_set": None, "modal_set_share": None}
    counts = Counter(e for row in sets for e in set(row))
    modal, hits = Counter(sets).most_common(1)[0]
    shares = [{"expert": e, "share": n / len(sets)} for e, n in sorted(counts.items(), key=lambda c: (-c[1], c[0]))]
    return {"prompts": len(sets), "experts": shares, "modal_set": list(modal), "modal_set_share": hits / len(sets)}


BRANCHES = {"attn_share": "attention", "routed_share": "routed experts", "shared_share": "shared expert"}


def jump_writer(shares: dict[str, float | None]) -> dict:
    """Which branch writes the most of the first token's output at a layer, from its medians of the shares
    (`ffn_share` stands for the FFN of a dense layer)."""
    names = dict(BRANCHES)
    if shares.get("routed_share") is None:
        names = {"attn_share": "attention", "ffn_share": "FFN"}
    known = {label: shares[key] for key, label in names.items() if shares.get(key) is not None}
    return {"branch": max(known, key=known.get) if known else None, "shares": known}
