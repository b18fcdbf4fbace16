"""Layer 2, core (ranks: tests/test_layers.py).

Prompts: what infer, locate and eval send to a model.

- files.py       prompt files: jsonl rows with 'messages', 'prompt' or 'text', or one prompt per line
- rendering.py   the chat template or plain text, encoded within the model's context (cut from the left, one warning)

Torch-free.
"""
