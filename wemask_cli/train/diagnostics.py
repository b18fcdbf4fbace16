"""`--log-diagnostics`: at every logging step, three numbers measured on a fixed probe of four locate prompts
(method/dynamics.py) join the trainer's logs as `wemask/first_token_norm`, `wemask/sink_mass` and
`wemask/effective_rank`, so the log history, every `--report-to` integration and metrics.json get them.

The model is measured as the trainer trains it (the WeMask mask on in aware mode, off in free mode; LoRA and the
remedies included), in eval mode under torch.no_grad, then put back in train mode. The probe's ME layer is the
mask's, else the one `--me-layer auto` locates (cached), else layer 0 for a model without one. Every process
measures the same probe on the same weights (nothing is exchanged between processes, so none waits for another).
A measurement at step 0, before the first update, opens the history. Imported only when a run starts (it imports
transformers).
"""

from __future__ import annotations

from transformers import TrainerCallback

from wemask_cli.method.dynamics import NAMES, layers_after, probe_dynamics
from wemask_cli.runtime.errors import WeMaskError

PREFIX = "wemask/"
KEYS = tuple(PREFIX + name for name in NAMES)
LOCATE_PROMPTS = "locate_prompts.jsonl"
PROBE = (2, 4, 6, 12)  # of the bundled locate prompts: prose, code, arithmetic, a chat question
PROBE_TOKENS = 64  # each prompt cut to its first 64 tokens


def check(resolved) -> None:
    """Before the output folder is claimed: refuse what the probe cannot measure, in one line."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    from wemask_cli.train import fsdp

    if fsdp.requested(resolved.args):
        raise WeMaskError("--log-diagnostics runs the probe on the model outside FSDP's wrapper, whose weights are sharded: "
                          "drop --log-diagnostics, or train under DDP or DeepSpeed")
    if resolved.mask.rates is None and is_deepspeed_zero3_enabled():
        raise WeMaskError("--log-diagnostics locates the ME layer of a run without a mask, which ZeRO-3-partitioned weights "
                          "do not allow: name it with --mask-rate 0 --me-layer N (`wemask locate` finds N)")


def probe_prompts() -> list:
    """The probe: PROBE of the bundled locate prompts."""
    from wemask_cli import resources
    from wemask_cli.prompts.files import read_prompt_file

    with resources.as_file(LOCATE_PROMPTS) as path:
        prompts = read_prompt_file(path, f"the bundled {LOCATE_PROMPTS}")
    return [prompts[i] for i in PROBE]


def probe_me_layer(config, loaded, args) -> tuple[int, str]:
    """(the probe's ME layer, how it was chosen): the mask's, else located as `--me-layer auto` does, else 0."""
    if isinstance(config.me_layer, int):
        return config.me_layer, "the mask's ME layer"
    from wemask_cli.mask_request.me_layer_cache import cached_me_layer

    with args.main_process_first(desc="locating the ME layer"):
        layer = cached_me_layer(loaded)
    return (0, "no ME layer found: layer 0") if layer is None else (layer, "located as --me-layer auto does")


class Diagnostics(TrainerCallback):
    """Measures the probe at step 0 (on_train_begin) and, once `attach`ed, in every training log."""

    def __init__(self, loaded, config, args):
        from wemask_cli.method.batch import pad_id_of
        from wemask_cli.prompts.rendering import encode

        self.prompts = probe_prompts()
        self.ids = encode(loaded.tokenizer, self.prompts, PROBE_TOKENS)
        self.pad_id = pad_id_of(loaded.tokenizer)
        self.me_layer, self.source = probe_me_layer(config, loaded, args)
        self.model = None
        self.with_mask = False

    def attach(self, trainer) -> None:
        """Add the diagnostics to each training log (one with a `loss`) before the trainer records and reports it."""
        from wemask_cli.method.wemask_hook import masked_layers

        self.model = trainer.model
        self.with_mask = bool(masked_layers(self.model))
        log = trainer.log

        def log_with_diagnostics(logs: dict, *args, **kwargs):
            if "loss" in logs:
                logs.update(self.measure())
            return log(logs, *args, **kwargs)

        trainer.log = log_with_diagnostics

    def measure(self) -> dict[str, float]:
        """{wemask/NAME: value} of the model now, in eval mode under no_grad; its train/eval mode restored."""
        model, training = self.model, self.model.training
        model.eval()
        try:
            values = probe_dynamics(model, self.ids, self.me_layer, pad_id=self.pad_id)
        finally:
            model.train(training)
        return {PREFIX + name: value for name, value in values.items()}

    def on_train_begin(self, args, state, control, **kwargs):
        """Step 0, before any update (a resumed run has it in its log history already)."""
        if self.model is not None and state.global_step == 0 and not any(KEYS[0] in entry for entry in state.log_history):
            state.log_history.append({**self.measure(), "step": 0})
        return control

    def metrics(self, trainer) -> dict:
        """metrics.json's `diagnostics` (the last values), `diagnostics_history` ([step, *NAMES] per measurement) and
        `diagnostics_probe` (what was measured, and where)."""
        from wemask_cli.method.arch import decoder_layers

        history = [[entry["step"], *(entry.get(key) for key in KEYS)] for entry in trainer.state.log_history
                   if KEYS[0] in entry and "step" in entry]  # fmt: skip
        layers = len(decoder_layers(self.model))
        probe = {
            "prompts": f"wemask_cli/resources/{LOCATE_PROMPTS}", "indices": list(PROBE), "tokens": [len(ids) for ids in self.ids],
            "me_layer": self.me_layer, "me_layer_source": self.source, "layers": layers_after(self.me_layer, layers),
            "with_mask": self.with_mask,
        }  # fmt: skip
        return {"diagnostics": dict(zip(NAMES, history[-1][1:])) if history else {}, "diagnostics_history": history,
                "diagnostics_probe": probe}
