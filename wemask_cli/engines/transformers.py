"""`--engine transformers` (the default): the model loaded by models.load_model, WeMask as hooks (the WeMask
intervention, method/wemask_hook.py), every feature. The forwards are in transformers_forward.py (torch); this module
imports no torch, so the CLI can list it."""

from __future__ import annotations

from contextlib import contextmanager

from wemask_cli.engines.base import ENGINES, Engine, EngineRequest


@ENGINES.register
class TransformersEngine(Engine):
    """A transformers causal LM (`module`, a PreTrainedModel or a PeftModel around one) and its tokenizer."""

    name = "transformers"
    summary = "default: hooks, every feature"
    supports = frozenset({"interventions", "quantization", "massive", "adapters", "module"})

    def __init__(self, loaded):
        """Around a models.LoadedModel."""
        self.module, self.tokenizer = loaded.model, loaded.tokenizer
        self.source, self.saved, self.installed = loaded.source, loaded.saved, loaded.installed

    @classmethod
    def load(cls, request: EngineRequest) -> tuple[Engine, list]:
        from wemask_cli.models.loading import load_model

        cls.check_request(request)  # what a subclass declares it does not support
        loaded = load_model(request.model, dtype=request.dtype, quantization=request.base_quantization,
                            pretrained={"trust_remote_code": request.trust_remote_code})
        return cls(loaded), request.mask.configs(loaded)

    @classmethod
    def loading(cls) -> str:
        return "Loading model..."

    @property
    def dtype(self):
        return self.module.dtype

    @property
    def pad_id(self) -> int:
        from wemask_cli.method.batch import pad_id_of

        return pad_id_of(self.tokenizer)

    @contextmanager
    def use_mask(self, config):
        """WeMask as the intervention installs it (hooks; any WeMask already there replaced, exactly these removed)."""
        if config is None:
            yield None
            return
        from wemask_cli.interventions.wemask import WeMask

        with WeMask(config).install(self.module) as installed:
            yield installed.config.config  # the resolved config, with the dims chosen per layer

    def token_logprobs(self, sequences):
        from wemask_cli.engines.transformers_forward import token_logprobs

        return token_logprobs(self.module, sequences, self.pad_id)

    def score_options(self, groups, batch_size, advance=None):
        from wemask_cli.engines.transformers_forward import score_options

        return score_options(self.module, groups, self.pad_id, batch_size, advance)

    def fit_batch_size(self, length, limit):
        from wemask_cli.engines.transformers_forward import fit_batch_size

        return fit_batch_size(self.module, length, limit, self.pad_id)

    def generate_ids(self, encoded, *, max_new_tokens, temperature, top_p, seed, batch_size=8, advance=None):
        from wemask_cli.engines.transformers_forward import generate_ids

        return generate_ids(self.module, encoded, self.pad_id, max_new_tokens=max_new_tokens, temperature=temperature,
                            top_p=top_p, seed=seed, batch_size=batch_size, advance=advance or (lambda done: None))

    def context_length(self):
        from wemask_cli.prompts.rendering import context_length

        return context_length(self.module)
