"""Trainer callbacks of a wemask run: the best checkpoint's remedies restored, a stop on divergence, a clean stop on Ctrl-C,
no extra step when resuming a run that had finished training, a warning when GRPO learns nothing.

Imported only when a run starts (it imports transformers).
"""

from __future__ import annotations

import math
import signal
import threading

from transformers import TrainerCallback

from wemask_cli.runtime.progress import say


class BestModelRemedies(TrainerCallback):
    """Restores the remedies' weights of the best checkpoint when --load-best-model-at-end reloads it (the records of
    each checkpoint are written by saving.StagedSaves)."""

    def __init__(self, record):
        self.record = record

    def on_train_end(self, args, state, control, **kwargs):
        """--load-best-model-at-end reloads the best checkpoint's model weights, which leave the remedies out (under
        LoRA: its adapter): their weights are restored from that checkpoint's interventions.safetensors. DeepSpeed
        and FSDP reload from their own checkpoints, which hold every parameter."""
        remedies = self.record.installation.remedies
        if remedies is None or not (args.load_best_model_at_end and state.best_model_checkpoint):
            return control
        if not (args.deepspeed or args.fsdp):
            from wemask_cli.interventions import load_saved

            remedies.load_state_dict(load_saved(state.best_model_checkpoint).weights)
        return control


class StopOnNonFinite(TrainerCallback):
    """Stops training at the first non-finite gradient (a NaN or infinite loss gives one too) or non-finite weight
    before a save: the bad update is not applied (gradients dropped before the optimizer step), nothing more is
    saved, and `diverged` says at which step and why, for the run to report and exit non-zero."""

    def __init__(self):
        self.diverged: tuple[int, str] | None = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if args.fp16 or model is None:  # fp16's loss scaler skips overflowing steps itself: inf gradients are normal
            return control
        if not self._all_agree(args, self._grads_finite(model)):
            for p in model.parameters():
                p.grad = None  # optimizers skip parameters without a gradient: the weights stay as they were
            self._stop(state.global_step + 1, "the loss or its gradient is not finite (NaN or infinity)", control)
        return control

    @staticmethod
    def _grads_finite(model) -> bool:
        import torch

        grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]
        return not grads or bool(torch.isfinite(torch.stack([g.float().norm() for g in grads]).sum()))

    @staticmethod
    def _all_agree(args, finite: bool) -> bool:
        """Under sharded training each process sees part of the gradients: all stop if any saw a bad one."""
        if args.world_size > 1:
            import torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                flag = torch.tensor([0.0 if finite else 1.0], device=args.device)
                dist.all_reduce(flag)
                return bool(flag.item() == 0)
        return finite

    def on_step_end(self, args, state, control, model=None, **kwargs):
        import torch

        if self.diverged is None and control.should_save and model is not None:
            finite = all(bool(torch.isfinite(p.detach()).all()) for p in model.parameters() if p.requires_grad)
            if not self._all_agree(args, finite):
                self._stop(state.global_step, "the weights became non-finite", control)
        if self.diverged is not None:
            control.should_save = False
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if self.diverged is None and isinstance(loss, float) and not math.isfinite(loss):
            self._stop(state.global_step, f"the logged loss is {loss}", control)
            control.should_save = False
        return control

    def _stop(self, step: int, why: str, control) -> None:
        self.diverged = (step, why)
        control.should_training_stop = True


class TrainingAlreadyDone(Exception):
    """Raised by FinishedAtResume: the resumed checkpoint is the run's last step (see there)."""


class FinishedAtResume(TrainerCallback):
    """A run killed during its final save resumes from its last checkpoint, at global_step == max_steps; the
    trainer's loop would still train one more step before its end-of-training check. Once the checkpoint is loaded
    (on_train_begin), this stops the loop before that step by raising TrainingAlreadyDone, which the run catches
    to redo only the final save."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            raise TrainingAlreadyDone
        return control


class LogLastStep(TrainerCallback):
    """Under several processes, the trainer's `train_loss` averages the loss across processes only at its logging
    steps and adds the steps since the last log from the main process alone, so it changed with --logging-steps.
    Logging the last step too makes every step's loss the mean across processes: `train_loss` is then the same
    whatever --logging-steps (one more log line at the end)."""

    def on_step_end(self, args, state, control, **kwargs):
        if args.world_size > 1 and state.max_steps > 0 and state.global_step >= state.max_steps:
            control.should_log = True
        return control


class Interrupt:
    """SIGINT/SIGTERM: finish the current step, save a checkpoint, stop (`signum`: the signal that asked). A second
    Ctrl-C aborts at once."""

    def __init__(self):
        self.requested = False
        self.signum: int | None = None
        self.stopped_at: int | None = None
        self._previous = {}

    def _handler(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested, self.signum = True, self.signum or signum
        say(f"{signal.Signals(signum).name} received: saving a checkpoint after this step, then stopping (Ctrl-C again aborts without saving)")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class SaveOnInterrupt(TrainerCallback):
    """Turns a requested interrupt into a save and a stop at the end of the step (every process agreeing)."""

    def __init__(self, interrupt: Interrupt):
        self.interrupt = interrupt

    def on_step_end(self, args, state, control, **kwargs):
        requested = self.interrupt.requested
        if args.world_size > 1:  # every process must agree, or saving (a collective under FSDP/ZeRO) hangs
            import torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                flag = torch.tensor([1.0 if requested else 0.0], device=args.device)
                dist.all_reduce(flag)
                requested = bool(flag.item() > 0)
        if requested:
            self.interrupt.requested = True
            self.interrupt.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control


class NoRewardSignal(TrainerCallback):
    """GRPO, RLOO: one warning the first time every completion of a logged step scored 0 (no learning signal at all)."""

    def __init__(self, stage: str) -> None:
        self.stage, self.warned = stage, False

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if self.warned or logs.get("reward") != 0 or logs.get("reward_std", 0) != 0 or not state.is_world_process_zero:
            return
        from wemask_cli.runtime.progress import warn

        self.warned = True
        warn(f"{self.stage} step {state.global_step}: every completion got reward 0, so the advantages and gradients are 0 "
             "(nothing is learned): check the rewards against the data (the answer column), a longer "
             "--max-completion-length, or a --reward format:W shaping term")
