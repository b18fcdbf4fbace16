"""How a model is named to the user (titles, tables, report lines), without importing torch: a GGUF file that
models/loading.py dequantized into `<cache>/models/<stem>-<fingerprint>` is named by its file, the embedded model as what
it is, hub ids and directories as given."""

from __future__ import annotations

import re
from pathlib import Path

EMBEDDED_STEM = "SmolLM2-135M-Instruct.Q4_1"  # gguf_cache.EMBEDDED_GGUF without its suffix
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF)"


def model_label(source) -> str:
    """'SmolLM2-135M-Instruct (embedded, dequantized Q4_1 GGUF)', 'mymodel.Q8_0.gguf', 'Qwen/Qwen3-4B', 'runs/sft'."""
    text = str(source or "?")
    path = Path(text)
    match = re.fullmatch(r"(.+)-[0-9a-f]{12}", path.name)
    if not match or path.parent.name != "models":
        return text
    return EMBEDDED_NAME if match.group(1) == EMBEDDED_STEM else f"{match.group(1)}.gguf"
