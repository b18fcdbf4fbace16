"""The vLLM engine's rollouts for a TRL trainer (`--use-vllm`, the Engine protocol's `rollouts` feature): the
checks before anything loads, TRL's colocated engine built as wemask needs it (colocate.py), and the policy's
WeMask installed on it. Importing this module imports neither torch nor vllm."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from wemask_cli.engines.base import Rollouts
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError

VLLM_SERVER_ON_CPU = (
    "--vllm-mode server needs GPUs: TRL syncs the trained weights to the vLLM server over NCCL (a CUDA device on "
    "the trainer's side); on CPU use --vllm-mode colocate (the default) or drop --use-vllm"
)
VLLM_QUANTIZED = (
    "--use-vllm with --load-in-{bits}bit: TRL's vLLM engine cannot take the bitsandbytes-quantized weights it would "
    "sync from the trained model; drop --use-vllm (rollouts from the trained model) or --load-in-{bits}bit"
)


class VllmRollouts(Rollouts):
    """TRL's vLLM rollouts (colocate mode in-process; server mode on GPUs) with the policy's mask."""

    def quiet(self) -> None:
        from wemask_cli.compat.vllm import silence_trl_version_warning

        silence_trl_version_warning()  # TRL warns at each of its vLLM checks, vLLM used or not: before TRL loads

    def check_installed(self) -> None:
        from wemask_cli.engines.vllm.install import check_vllm_installed

        check_vllm_installed("--use-vllm", instead="drop --use-vllm (rollouts from the trained model)")

    def check(self, resolved, aware_mask: bool) -> None:
        """What vLLM cannot run, in one line before any model loads."""
        import torch

        from wemask_cli.engines.vllm.support import check_folder_architecture, require_vllm

        args = resolved.args
        if args.vllm_mode == "server":
            from wemask_cli.engines.vllm.server import server_url, wait_for_server

            if args.use_cpu or not torch.cuda.is_available():
                raise WeMaskError(VLLM_SERVER_ON_CPU)
            wait_for_server(server_url(args), args.vllm_server_timeout)
        if resolved.remedies:
            kinds = ", ".join(remedy.describe() for remedy in resolved.remedies)
            raise WeMaskError(f"--use-vllm: {kinds} add modules that vLLM's model classes do not have: drop --use-vllm or the remedies")
        bits = "4" if resolved.opts.get("load_in_4bit") else "8" if resolved.opts.get("load_in_8bit") else None
        if bits:
            raise WeMaskError(VLLM_QUANTIZED.format(bits=bits))
        require_vllm()
        if aware_mask and resolved.mask.rates is not None:
            from wemask_cli.engines.vllm.tensor_mask import check_config

            mask = resolved.mask  # the saved config of a --model without --mask-rate is checked when it is installed
            check_config(WeMaskConfig(mask_rate=max(mask.rates), layers="all", tokens=mask.tokens or "first", select=mask.select or "weight"))
        model = Path(str(resolved.opts["model"] or "")).expanduser()
        if aware_mask and resolved.opts["model"] and model.is_dir():
            check_folder_architecture(model)  # one the vLLM mask covers (a hub id: checked when the mask is installed)

    @contextmanager
    def building(self, ctx):
        """Around the trainer's construction: TRL's colocated vLLM engine built as wemask needs it (colocate.py)."""
        args = ctx.args
        if args.vllm_mode != "colocate":
            yield
            return
        from wemask_cli.engines.vllm.colocate import colocated_engine
        from wemask_cli.engines.vllm.memory import VllmJob

        dtype = None if (args.bf16 or args.fp16) else ctx.model.dtype  # mixed precision: vLLM's own choice
        masked = ctx.wemask.mode == "aware" and ctx.wemask.active
        job = VllmJob(sequences=args.generation_batch_size, tokens=args.vllm_max_model_length)
        with colocated_engine(ctx.model, dtype, masked=masked, job=job):
            yield

    def install(self, trainer, config) -> None:
        """The policy's mask on the engine TRL built (colocate), or in every worker of the server (server mode:
        the config with its recorded dims, over /collective_rpc), checked at every step."""
        from wemask_cli.engines.vllm.colocate import engine_mask_check, mask_rollouts, rollout_mask

        if trainer.args.vllm_mode == "server":
            from wemask_cli.engines.vllm.server import server_mask_check, server_url

            url = server_url(trainer.args)
            trainer.add_callback(server_mask_check(url, rollout_mask(config)))
            return
        installed = mask_rollouts(trainer, config)  # reads TRL's settings through checked names (compat.vllm)
        trainer.add_callback(engine_mask_check(trainer, installed.dims if installed else None))

    def serve(self, request) -> None:
        from wemask_cli.engines.vllm.server import serve

        serve(request)

