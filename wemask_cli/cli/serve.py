"""`wemask vllm-serve`: flags; the work in `wemask_cli.commands.serve` (the rollout engine's server)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from wemask_cli.cli import options as opt

SERVE_HELP = """TRL's vLLM server (`trl vllm-serve`) with WeMask in every worker, for `wemask grpo --use-vllm --vllm-mode server`.

The mask: --mask-rate (and --me-layer ...), else the wemask_config.json saved in --model, else none. A GRPO run
installs its own mask (its recorded dims) in the server's workers when it connects. Runs until stopped (Ctrl-C).
"""


def vllm_serve(
    model: opt.ModelOpt = None,
    mask_rate: Annotated[Optional[str], typer.Option("--mask-rate", "-r", help="Share r in [0, 1] of dims to mask (one rate).")] = None,
    me_layer: opt.MeLayerOpt = None,
    select: opt.SelectOpt = None,
    layers: opt.LayersOpt = None,
    strength: opt.StrengthOpt = None,
    tokens: opt.TokensOpt = None,
    host: Annotated[str, typer.Option(help="Address to serve on (TRL's default).")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port to serve on (TRL's --vllm-server-port default).")] = 8000,
    tensor_parallel_size: opt.TensorParallelOpt = 1,
    data_parallel_size: opt.DataParallelOpt = 1,
    dtype: opt.DtypeOpt = "auto",
    max_model_len: Annotated[Optional[int], typer.Option(help="Longest prompt + completion, in tokens (default: the model's).")] = None,
    vllm_memory: opt.VllmMemoryOpt = None,
    enforce_eager: Annotated[Optional[bool], typer.Option("--enforce-eager/--no-enforce-eager", help="No compiled graphs (default: on CPU only).")] = None,
    seed: int = 0,
    trust_remote_code: opt.TrustRemoteCodeOpt = False,
):
    from wemask_cli.commands.serve import ServeRequest, run_serve
    from wemask_cli.mask_request.flags import MaskRequest

    run_serve(ServeRequest(
        model=model, mask=MaskRequest.parse(mask_rate, me_layer, select, layers, strength, tokens), host=host, port=port,
        tensor_parallel=tensor_parallel_size, data_parallel=data_parallel_size, dtype=dtype, max_model_len=max_model_len,
        memory=vllm_memory, enforce_eager=enforce_eager, seed=seed, trust_remote_code=trust_remote_code,
    ))


def register(app: typer.Typer) -> None:
    app.command("vllm-serve", help=SERVE_HELP)(vllm_serve)
