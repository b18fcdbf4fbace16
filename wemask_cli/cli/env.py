"""`wemask env`: the versions, tested environment, device and cache folder a bug report needs."""

from __future__ import annotations

import typer


def env() -> None:
    """Print the versions of wemask's libraries (torch, transformers, trl, peft, accelerate, vllm, deepspeed,
    bitsandbytes), which tested environment they match ("current" or "vllm"), the device a command would use, and
    the cache folder. Optional ones show 'not installed'."""
    import platform
    import sys

    from wemask_cli.resources import tested_environments
    from wemask_cli.runtime.tested import describe, untested_versions
    from wemask_cli.runtime.versions import ENV_LIBRARIES, TESTED_LIBRARIES, library_versions, which_environment

    print(f"python        {platform.python_version()} ({sys.executable})")
    for name, version in library_versions(ENV_LIBRARIES).items():
        print(f"{name:<13} {version or 'not installed'}")
    name, _ = which_environment(library_versions(TESTED_LIBRARIES), tested_environments())
    differ = untested_versions()  # the warning's own list: the tested environments' and the compat modules' ranges
    if differ:
        print(f"environment   {name}, with untested versions: {describe(differ)}")
    else:
        print(f"environment   {name} (every version as `make test` ran it)")
    import torch

    from wemask_cli.runtime.cache_dir import cache_dir

    if torch.cuda.is_available():
        device = f"cuda: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    else:
        device = f"cpu ({torch.get_num_threads()} threads; no CUDA device visible)"
    print(f"device        {device}")
    print(f"cache         {cache_dir()} (set WEMASK_CACHE to move it)")


def register(app: typer.Typer) -> None:
    app.command()(env)
