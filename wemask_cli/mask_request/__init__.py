"""Layer 2, core (ranks: tests/test_layers.py).

The mask request: WeMask's flags, parsed once, resolved into WeMaskConfigs for a loaded model.

- flags.py           MaskRequest: --mask-rate, --me-layer, --select, --layers, --strength, --tokens, from CLI
                     strings or recipe values, one clear line on bad input, torch-free
- me_layer_cache.py  `--me-layer auto`: a fast locate per model, cached

The mask itself is elsewhere, one module per engine: method/wemask_hook.py (transformers hooks) and
engines/vllm/tensor_mask.py (vLLM's tensor operation).
"""
