"""wemask_cli.progress: plain lines by default, silent off the main process, a reporter the CLI can replace."""

from __future__ import annotations

import contextlib

from wemask_cli import progress


def test_plain_lines_on_stderr_and_no_ops(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    progress.set_reporter(None)
    with progress.status("Loading model..."):
        progress.say("ME layer (auto): 11 (0-based)")
        progress.warn("2 of 5 prompt(s) were cut")
    with progress.task("Measuring layers", total=3) as advance:
        advance(2)
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
