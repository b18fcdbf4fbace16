"""The libraries' warnings wemask quiets, only while one of its commands runs (cli.main), never for the whole process,
and the start-up log lines of theirs that say nothing about the run (`wemask -v` shows them again).

Their deprecation notices (FutureWarning) are not the user's doing, and under a launcher the main process speaks for
all, so the other processes' warnings are off too. The filters match where a warning is raised from (its module),
so a warning attributed to the user's own code (a reward function calling a deprecated API) still shows; everything
is restored when the command returns.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from wemask_cli.compat.bitsandbytes import NOTICE_LOGGER, NOTICE_START
from wemask_cli.runtime.versions import LIBRARIES, import_name

PACKAGES = tuple(import_name(library) for library in LIBRARIES)  # runtime/versions.py's one list, as they are imported
FROM_LIBRARIES = rf"({'|'.join(PACKAGES)})(\.|$)"  # warnings.filterwarnings matches it at the module's start


@contextmanager
def library_notices_quiet(every_warning: bool = False) -> Iterator[None]:
    """FutureWarnings raised from the libraries' code off while the block runs; with `every_warning` (a process other
    than the main one) every warning off."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=FROM_LIBRARIES)
        if every_warning:
            warnings.filterwarnings("ignore")
        yield


# Start-up lines by logger: bitsandbytes' kernels-community notice (compat/bitsandbytes.py), and DeepSpeed's
# accelerator fallback, printed whenever transformers or accelerate import DeepSpeed to ask whether it is there.
LOG_NOTICES = {NOTICE_LOGGER: NOTICE_START, "DeepSpeed": "Setting accelerator to CPU. If you have GPU or other accelerator"}


class _DropNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LOG_NOTICES.get(record.name, "\0"))


_FILTER = _DropNotice()


def drop_log_notices() -> None:
    """Filter those lines (before or after their library is imported: a logger keeps its filters)."""
    for name in LOG_NOTICES:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def keep_log_notices() -> None:
    """`wemask -v`: every library line shown again (vLLM's start-up too, unless VLLM_LOGGING_LEVEL says otherwise)."""
    for name in LOG_NOTICES:
        logging.getLogger(name).removeFilter(_FILTER)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")  # vLLM's default, which its engines started by wemask lower
