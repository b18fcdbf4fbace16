"""An engine declared outside the package, as a plugin's module would (tests/test_engine_plugin.py).

`toy` wraps the transformers engine behind the Engine protocol alone: it forwards `use_mask`, `token_logprobs`,
`generate_ids` and `context_length`, keeps the base class's `score_options` (each option scored whole) and
`fit_batch_size`, and declares every feature but quantization. Importing this module needs no torch.
"""

from __future__ import annotations

from wemask_cli.engines.base import Engine
from wemask_cli.engines.transformers import TransformersEngine


class ToyEngine(Engine):
    name = "toy"
    summary = "toy plugin: the transformers engine, wrapped"
    supports = TransformersEngine.supports - {"quantization"}
    versions = {"toy-engine": "0.1"}

    def __init__(self, inner: TransformersEngine):
        self.inner, self.module = inner, inner.module
        self.tokenizer, self.source, self.saved, self.installed = inner.tokenizer, inner.source, inner.saved, inner.installed
        self.dtype = inner.dtype

    @classmethod
    def load(cls, request):
        cls.check_request(request)
        inner, configs = TransformersEngine.load(request)
        return cls(inner), configs

    def use_mask(self, config):
        return self.inner.use_mask(config)

    def token_logprobs(self, sequences):
        return self.inner.token_logprobs(sequences)

    def generate_ids(self, encoded, **options):
        return self.inner.generate_ids(encoded, **options)

    def context_length(self):
        return self.inner.context_length()
