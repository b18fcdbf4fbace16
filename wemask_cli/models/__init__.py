"""Layer 2, core (ranks: tests/test_layers.py).

Models: one way for every command to load a model and its tokenizer.

- loading.py      load_model(): hub id | local folder | LoRA adapter | .gguf | the embedded default; re-applies the
                  interventions a training run saved
- quantization.py bitsandbytes 4-bit/8-bit loading and the quantization a run recorded
- bos.py          every sequence starts with BOS where the tokenizer's own metadata says so
- gguf_cache.py   a .gguf file dequantized once into a cached Hugging Face folder
- names.py        how a model is named to the user (torch-free)

Importing this package imports nothing heavy; loading.py imports torch and transformers.
"""
