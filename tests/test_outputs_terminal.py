"""What wemask prints: the eval results fit an 80-column terminal with no header cut, and bitsandbytes' CPU notice
about kernels-community is dropped (exactly that message) on every import."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest
from rich.console import Console

from wemask_cli.eval.stats import summarize
from wemask_cli.render.eval import eval_tables

METRICS = {"perplexity": 300.0, "word_perplexity": 8.7e9, "byte_perplexity": 70.7, "bits_per_byte": 6.14}


def perplexity_document(quantize: bool) -> dict:
    """A perplexity sweep over two mask rates (and two quantizations): four metrics, paired changes."""
    results = []
    for rate in (0.0, 0.5):
        for scheme in ("none", "w4a4") if quantize else ("none",):
            for metric, value in METRICS.items():
                row = {"mask_rate": rate, "mode": "aware", "me_layer": 1, "seed": 0, "metric": metric, "value": value * (1 + rate),
                       "se": 0.1, "n": 2, "delta": rate, "delta_se": 0.05}  # fmt: skip
                if quantize:
                    row.update(quantize=scheme, delta_quantize=0.2, delta_quantize_se=0.01)
                results.append(row)
    axes = ["mask_rate", "quantize"] if quantize else ["mask_rate"]
    return {"task": "perplexity", "summary": summarize(results, ["mask_rate", "mode", "me_layer", *axes[1:]]), "unit": "windows",
            "primary_metric": "perplexity", "seeds": {"count": 1}, "n_examples": 2, "axes": axes,
            "deltas": {"delta": "mask_rate=0", "delta_quantize": "quantize=none"}}  # fmt: skip


def rendered(document: dict, width: int) -> tuple[str, int]:
    console = Console(width=width, file=io.StringIO(), record=True)
    tables = eval_tables(document, width)
    for table in tables:
        console.print(table)
    return console.export_text(), len(tables)


@pytest.mark.parametrize("quantize", [False, True])
def test_eval_table_fits_80_columns_with_every_header_whole(quantize):
    document = perplexity_document(quantize)
    text, count = rendered(document, 80)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for header in [*METRICS, "mask rate", "mode", *(["quantize"] if quantize else []), "(paired)"]:
        assert header in text, header
    assert count >= 2 and "other metrics (same rows)" in text
    wide, count = rendered(document, 250)
    assert count == 1 and "…" not in wide  # a wide terminal: one table, as before


def test_bitsandbytes_kernel_notice_is_dropped_and_nothing_else():
    from wemask_cli.compat.bitsandbytes import NOTICE_LOGGER
    from wemask_cli.compat.notices import drop_log_notices

    script = (
        "import sys\nfrom wemask_cli.compat.bitsandbytes import four_bit_kernel_line\n"
        "from wemask_cli.compat.notices import drop_log_notices\ndrop_log_notices()\n"
        "import bitsandbytes\nops = sys.modules['bitsandbytes.backends.cpu.ops']\n"
        "print(getattr(ops, 'gemm_4bit_forward_kernel', 'no avx512'), four_bit_kernel_line(), sep='|')\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=True)
    kernel, line = done.stdout.strip().split("|")
    assert "kernels-community" not in done.stderr and line.startswith("4-bit on CPU: ")
    if kernel == "None":  # the notice was logged (and dropped): the line names the fallback and the fix
        assert "bitsandbytes' own CPU kernel" in line and "pip install 'kernels" in line
    drop_log_notices()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger(NOTICE_LOGGER)
    logger.addHandler(handler)
    try:
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please ...", "no kernels")
        logger.warning("another bitsandbytes warning")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue() == "another bitsandbytes warning\n"
