"""`wemask probe`: causal tests of the ME layer, each probe (wemask_cli/probes/) against the unmodified model.

Report keys (--json): model, model_type, num_layers, layer_indexing ("0-based"), prompts (how many), me_layer,
me_layer_source ("located" or "--me-layer"), located_me_layer (what locate finds on these prompts, null for none),
settings (seed, top_k, patch_position, swap_with, mask_rates, batch_size, max_length), unmodified (one run), probes
(one run per probe, with probe, summary, details: what it did, jump_over_unmodified), skipped (probe, reason: the
probes that do not apply to this model). A run: jump (the first token's norm at the ME layer over its norm entering
it, median over the prompts), first_over_other (its norm over the other tokens' there), first_norm (per layer),
mean_first_norm_after_me, sink_mass (per layer), mean_sink_mass_after_me, sink_position (per layer, the key position
receiving the most attention, 0 = the first token, the most common over the prompts), sink_position_share,
sink_lands (the most common of those after the ME layer), sink_lands_layers (its share of those layers),
located_me_layer (the ME layer locate finds on that model), diversity (per layer, as in locate), mask_rates (one
record per --mask-rate, as locate's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wemask_cli.prompts.sets import MeasuringRequest
from wemask_cli.runtime.errors import WeMaskError


@dataclass
class ProbeRequest(MeasuringRequest):
    """Everything `wemask probe` was asked, parsed (`mask_rates`: already checked)."""

    probes: list[str] = field(default_factory=list)
    me_layer: int | None = None
    seed: int = 0
    top_k: int = 1
    patch_position: int = 1
    swap_with: int | None = None


def check_request(request: ProbeRequest) -> None:
    """What needs no model: the flags' ranges, the layers against config.json, the output files."""
    from wemask_cli.models.preflight import check_layer_index, check_model_source

    if request.batch_size < 1 or request.max_length < 1 or request.top_k < 1:
        raise WeMaskError("--batch-size, --max-length and --top-k must be at least 1")
    if request.patch_position < 1:
        raise WeMaskError(f"--patch-position {request.patch_position} is the first token: use 1 or more (0-based)")
    if request.swap_with is not None and request.swap_with == request.me_layer:
        raise WeMaskError(f"--swap-with {request.swap_with} is the ME layer itself: give another layer (0-based)")
    check_model_source(request.model)
    for flag, layer in (("--me-layer", request.me_layer), ("--swap-with", request.swap_with)):
        check_layer_index(layer, request.model, flag, auto=False)
    request.check_outputs()


def probe(request: ProbeRequest, plot: Callable[[dict, Path], Path] | None = None) -> tuple[dict, list[Path]]:
    """The whole command: flags, outputs and prompts checked before torch is imported, each probe measured, --json
    written and --plot drawn by `plot` (the CLI's renderer). Returns (the report, the files written)."""
    check_request(request)
    texts = request.texts()

    from wemask_cli.method.arch import model_type, resolve_layers
    from wemask_cli.method.batch import pad_id_of
    from wemask_cli.models.loading import load_model
    from wemask_cli.outputs import atomic_write_json
    from wemask_cli.probes.base import ProbeSettings
    from wemask_cli.probes.registry import PROBES
    from wemask_cli.probes.run import measure, prepare
    from wemask_cli.prompts.rendering import encode
    from wemask_cli.runtime.progress import status, task

    names = [PROBES.get(name).name for name in request.probes]  # an unknown name: one line, before the load
    settings = ProbeSettings(seed=request.seed, top_k=request.top_k, patch_position=request.patch_position,
                             swap_with=request.swap_with)
    with status("Loading model..."):
        loaded = load_model(request.model, dtype=request.dtype, quantization=request.base_quantization,
                            pretrained={"trust_remote_code": request.trust_remote_code})
    ids = encode(loaded.tokenizer, texts, request.max_length)
    batching = dict(batch_size=request.batch_size, pad_id=pad_id_of(loaded.tokenizer))
    with status("Measuring the unmodified model..."):
        prepared = prepare(loaded.model, ids, names=names, settings=settings, me_layer=request.me_layer, **batching)
    with task("Probing the ME layer (prompts)", len(texts) * prepared.passes(request.mask_rates)) as advance:
        measured = measure(prepared, ids, mask_rates=request.mask_rates, progress=advance, **batching)
    report = {
        "model": loaded.source, "model_type": model_type(loaded.model), "num_layers": len(resolve_layers(loaded.model)),
        "layer_indexing": "0-based", "prompts": len(texts), **measured,
    }  # fmt: skip
    report["settings"]["max_length"] = request.max_length
    written = [atomic_write_json(request.json_out, report)] if request.json_out else []
    if request.plot and plot is not None:
        written.append(plot(report, request.plot))
    return report, written
