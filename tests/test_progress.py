"""wemask_cli.runtime.progress: plain lines by default, silent off the main process, a reporter the CLI can replace."""

from __future__ import annotations

import contextlib
from pathlib import Path

from wemask_cli.runtime import progress


def test_plain_lines_on_stderr_and_no_ops(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    progress.set_reporter(None)
    with progress.status("Loading model..."):
        progress.say("ME layer (auto): 11 (0-based)")
        progress.warn("2 of 5 prompt(s) were cut")
    out, err = capsys.readouterr()
    assert out == "" and err == "wemask: ME layer (auto): 11 (0-based)\nwemask: warning: 2 of 5 prompt(s) were cut\n"


def test_only_the_main_process_speaks(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    progress.say("hello")
    progress.warn("careful")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    progress.say("hello")
    assert capsys.readouterr().err == "wemask: hello\n"


def test_a_reporter_receives_everything(monkeypatch):
    seen = []

    class Recorder:
        def status(self, message):
            seen.append(("status", message))
            return contextlib.nullcontext()

        def line(self, text):
            seen.append(("line", text))

        @contextlib.contextmanager
        def task(self, description, total):
            seen.append(("task", description, total))
            yield lambda n=1: seen.append(("advance", n))

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    progress.set_reporter(Recorder())
    try:
        with progress.status("working"):
            progress.warn("w")
        with progress.task("t", 4) as advance:
            advance(4)
    finally:
        progress.set_reporter(None)
    assert seen == [("status", "working"), ("line", "wemask: warning: w"), ("task", "t", 4), ("advance", 4)]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_lines_at_every_tenth_with_an_eta():
    """A log gets a plain line at every 10% of the work (not at every unit), with the elapsed time and an ETA."""
    clock, lines = Clock(), []
    counter = progress.LineProgress("eval r=0.3", 200, lines.append, clock=clock)
    for _ in range(200):
        clock.now += 1.27  # a 254 s quantized eval
        counter.advance()
    assert len(lines) == 10
    assert lines[0] == "eval r=0.3: 20/200 (10%), 25 s elapsed, ETA 3 min 49 s"
    assert lines[-1] == "eval r=0.3: 200/200 (100%), 4 min 14 s elapsed"


def test_progress_lines_for_few_units_and_long_gaps():
    """Ten units or fewer: a line each; a slow stretch between tenths still gets a line every INTERVAL_S seconds."""
    clock, lines = Clock(), []
    few = progress.LineProgress("prompts", 3, lines.append, clock=clock)
    for _ in range(3):
        few.advance()
    assert [line.split(",")[0] for line in lines] == ["prompts: 1/3 (33%)", "prompts: 2/3 (66%)", "prompts: 3/3 (100%)"]
    lines.clear()
    slow = progress.LineProgress("steps", 1000, lines.append, clock=clock)
    clock.now += progress.INTERVAL_S
    slow.advance(5, "loss 2.31")
    assert lines == ["steps: 5/1000 (0%), 1 min 0 s elapsed, ETA 3 h 19 min; loss 2.31"]


def test_plain_reporter_tasks_print_progress_lines(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    progress.set_reporter(None)
    with progress.task("Measuring layers", total=2) as advance:
        advance()
        advance()
    err = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in err] == ["wemask: Measuring layers: 1/2 (50%)", "wemask: Measuring layers: 2/2 (100%)"]


def test_the_cli_reporter_prints_lines_when_stderr_is_not_a_terminal(capsys):
    """In the CLI a terminal gets rich's transient bar; a log (not a terminal) gets the same plain lines."""
    from wemask_cli.render.common import RichReporter, err_console

    assert not err_console.is_terminal  # pytest captures stderr
    with RichReporter().task("choice r=0", 4) as advance:
        advance(4)
    assert "choice r=0: 4/4 (100%)" in capsys.readouterr().err


def test_training_and_eval_sweeps_log_progress(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """A real sft run and a real eval sweep with stderr captured (not a terminal): steps and settings are logged."""
    from conftest import run_main

    data = Path(__file__).resolve().parent.parent / "data" / "sft_chat.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--output-dir", str(tmp_path / "sft"),
                            "--dataset", str(data), "--max-steps", "3", "--per-device-train-batch-size", "2",
                            "--max-length", "32", "--save-strategy", "no", "--logging-steps", "1", "--report-to", "none")  # fmt: skip
    assert code == 0, err
    steps = [line for line in err.splitlines() if line.startswith("wemask: training steps: ")]
    assert [line.split(",")[0] for line in steps] == [f"wemask: training steps: {n}/3 ({100 * n // 3}%)" for n in (1, 2, 3)], err
    assert "ETA" in steps[0] and "loss" in steps[-1]
    ppl = Path(__file__).resolve().parent.parent / "wemask_cli" / "resources" / "eval" / "perplexity.txt"
    code, _, err = run_main(monkeypatch, capsys, "eval", "--model", tiny_model_dir, "--task", "perplexity", "--data", str(ppl),
                            "--window", "16", "--limit", "2", "--mask-rates", "0,1", "--me-layer", "1", "--output", str(tmp_path / "ev"))  # fmt: skip
    assert code == 0, err
    done = [line for line in err.splitlines() if "(100%)" in line]
    assert len(done) == 2, err  # one per setting (r=0, r=1)


def test_training_log_has_wemask_lines_only_and_rounded_losses(monkeypatch, capsys, tiny_model_dir, tmp_path):
    """A real sft run logged (stderr not a terminal): no dict of transformers' printer ("{'loss': 1.3016403913497925,
    ...}") beside wemask's lines, with --disable-tqdm too, and every loss wemask prints has 4 significant digits."""
    import re

    from conftest import run_main

    data = Path(__file__).resolve().parent.parent / "data" / "sft_chat.jsonl"
    for extra in ([], ["--disable-tqdm", "true"]):
        code, out, err = run_main(monkeypatch, capsys, "sft", "--model", tiny_model_dir, "--output-dir", str(tmp_path / f"sft{len(extra)}"),
                                  "--dataset", str(data), "--max-steps", "2", "--per-device-train-batch-size", "2", "--max-length", "32",
                                  "--logging-steps", "1", "--report-to", "none", *extra)  # fmt: skip
        assert code == 0, err
        assert "{'loss'" not in out + err and "'train_runtime'" not in out + err, out + err
        losses = re.findall(r"loss (-?[0-9][0-9.e+-]*)", err)
        assert any("final loss" in line for line in err.splitlines()) and len(losses) >= 2, err
        assert all(loss.rstrip(".") == f"{float(loss.rstrip('.')):.4g}" for loss in losses), losses
