"""One rule for a command stopped by a signal, training or not: Ctrl-C (SIGINT) is `wemask: interrupted`, exit 130;
SIGTERM is `wemask: terminated (SIGTERM)`, exit 143. A training run saves a checkpoint first and names it on that
line. Through the real CLI (`wemask sft`, `wemask locate`) on a tiny model."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from conftest import run_main
from transformers import TrainerCallback

import wemask_cli.train.run as run_module

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
PPL_TEXT = str(ROOT / "wemask_cli" / "resources" / "eval" / "perplexity.txt")
TRL = ["--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none", "--seed", "0", "--max-steps", "4"]
STOP_LINES = {signal.SIGINT: (130, "wemask: interrupted"), signal.SIGTERM: (143, "wemask: terminated (SIGTERM)")}


class SignalAtStep1(TrainerCallback):
    """The signal `signum` arrives at the end of step 1, as from Ctrl-C or `kill`."""

    def __init__(self, signum: int):
        self.signum = signum

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            os.kill(os.getpid(), self.signum)
        return control


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_training_stopped_by_a_signal_saves_then_follows_the_rule(monkeypatch, capsys, tmp_path, tiny_model_dir, signum):
    """SIGTERM during training exited 130 with "interrupted", the code and word of Ctrl-C."""
    with_callbacks = run_module.run_callbacks
    monkeypatch.setattr(run_module, "run_callbacks", lambda callbacks, *rest: with_callbacks([SignalAtStep1(signum), *callbacks], *rest))
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--dataset", DATA, "-o", str(out), *TRL)
    want_code, want_line = STOP_LINES[signum]
    last = err.strip().splitlines()[-1]
    assert code == want_code and "Traceback" not in err, err
    assert last == f"{want_line}: checkpoint saved to {out / 'checkpoint-1'}; continue with the same command and --resume"
    assert (out / "checkpoint-1").is_dir() and not (out / ".wemask.lock").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_another_command_stopped_by_a_signal_follows_the_same_rule(monkeypatch, capsys, tmp_path, tiny_model_dir, signum,
                                                                   python_sigint_handler):
    """`wemask eval` stopped while it loads the model: the same words and codes, and the folder it created removed."""
    import wemask_cli.models.loading as loading

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(loading, "load_model", signalled)
    out = tmp_path / "eval"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--data", PPL_TEXT,
                            "--limit", "2", "--window", "16", "--output", str(out))
    want_code, want_line = STOP_LINES[signum]
    assert code == want_code and err.strip().splitlines()[-1] == want_line and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []
