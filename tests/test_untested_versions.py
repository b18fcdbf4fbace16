"""Libraries at versions `make test` did not run: the training commands say so in one warning line as training starts,
and a failure raised inside a library's code then names those versions in its one line, not "a bug in wemask".
The versions are faked where every command reads them (runtime/versions.py's `library_versions`)."""

from __future__ import annotations

from pathlib import Path

import accelerate
import pytest
from conftest import run_main

from wemask_cli import resources
from wemask_cli.cli import BUG_REPORT
from wemask_cli.runtime import versions

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "data" / "sft_chat.jsonl")
TRL = ["--per-device-train-batch-size", "2", "--max-length", "32", "--report-to", "none", "--max-steps", "1"]
OLD = {"accelerate": "1.14.0", "trl": "1.15.0"}  # the example: an older accelerate beside an older TRL
NAMED = "trl 1.15.0 (tested 1.16), accelerate 1.14.0 (tested 1.16)"  # in the order of runtime/versions.py's LIBRARIES
INSTALL = 'pip install "trl>=1.16,<1.17" "accelerate>=1.16,<1.17"'


def installed_as(monkeypatch, fake: dict[str, str | None]) -> None:
    """The installed versions read as `fake` for the libraries it names, as they are for the others."""
    real = versions.library_versions
    monkeypatch.setattr(versions, "library_versions", lambda names: {**real(names), **{k: v for k, v in fake.items() if k in names}})


def recorded() -> dict[str, str | None]:
    return dict(resources.tested_environments()["current"]["versions"])


def sft(monkeypatch, capsys, out: Path) -> tuple[int, str, str]:
    return run_main(monkeypatch, capsys, "sft", "--model", str(out.parent / "model"), "--dataset", DATA, "-o", str(out), *TRL)


@pytest.fixture
def model(tmp_path, tiny_model_dir):
    (tmp_path / "model").symlink_to(tiny_model_dir)


def test_training_warns_once_before_it_starts_and_env_says_the_same(monkeypatch, capsys, tmp_path, model):
    installed_as(monkeypatch, OLD)
    code, _, err = sft(monkeypatch, capsys, tmp_path / "run")
    lines = err.splitlines()
    warnings = [i for i, line in enumerate(lines) if "untested versions" in line]
    assert code == 0 and len(warnings) == 1, err
    assert lines[warnings[0]] == f"wemask: warning: untested versions: {NAMED}: wemask may fail inside them; `{INSTALL}` installs the tested ones"
    assert warnings[0] < next(i for i, line in enumerate(lines) if line.startswith("wemask: training steps"))  # before it trains
    code, out, _ = run_main(monkeypatch, capsys, "env")
    assert code == 0 and f"with untested versions: {NAMED}" in out


def test_at_the_tested_versions_there_is_no_warning(monkeypatch, capsys, tmp_path, model):
    installed_as(monkeypatch, recorded())
    code, _, err = sft(monkeypatch, capsys, tmp_path / "run")
    assert code == 0 and "untested" not in err, err


def test_a_failure_inside_a_library_at_untested_versions_is_one_line_naming_them(monkeypatch, capsys, tmp_path, model):
    """accelerate 1.14 with TRL 1.15 was a traceback inside TRL ending in "a bug in wemask"."""
    installed_as(monkeypatch, OLD)
    monkeypatch.delattr(accelerate, "__version__")  # what TRL's SFTTrainer reads, missing: it fails inside TRL
    code, _, err = sft(monkeypatch, capsys, tmp_path / "run")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        f"wemask: error: AttributeError inside trl, with untested versions installed ({NAMED}): module 'accelerate' has no "
        f"attribute '__version__'; install the tested versions: {INSTALL}"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("installed", ["recorded", "only accelerate older"])
def test_the_same_failure_is_a_bug_report_unless_an_untested_library_ran(monkeypatch, capsys, tmp_path, model, installed):
    """Only a library whose code the traceback runs through counts: TRL at its tested version failing is a bug report
    (naming the untested accelerate first), not blamed on accelerate."""
    installed_as(monkeypatch, recorded() if installed == "recorded" else {**recorded(), "accelerate": "1.14.0"})
    monkeypatch.delattr(accelerate, "__version__")
    with pytest.raises(AttributeError, match="__version__") as info:
        sft(monkeypatch, capsys, tmp_path / "run")
    assert info.value.__notes__[0].endswith(BUG_REPORT)
    assert ("accelerate 1.14.0 (tested 1.16)" in info.value.__notes__[0]) is (installed != "recorded")


def test_a_bug_in_wemask_names_untested_versions_in_its_report(monkeypatch, capsys):
    import wemask_cli.cli.env as env_module

    def planted(*args, **kwargs):
        raise TypeError("planted bug")

    installed_as(monkeypatch, OLD)
    monkeypatch.setattr(env_module, "print", planted, raising=False)  # a bug in wemask's own code: the report stays
    with pytest.raises(TypeError, match="planted bug") as info:
        run_main(monkeypatch, capsys, "env")
    assert info.value.__notes__ == [f"wemask: untested versions are installed ({NAMED}): try `{INSTALL}` first; if it still fails: {BUG_REPORT}"]


def test_untested_is_outside_the_release_series_the_environments_ran():
    environments = {"a": {"versions": {"transformers": "5.24.0", "accelerate": "1.15.0", "torch": "2.13.0+cpu", "vllm": None}},
                    "b": {"versions": {"transformers": "5.19.0", "accelerate": "1.15.0", "torch": "2.13.0+cpu", "vllm": "0.32.0"}}}
    same = {"transformers": "5.21.0", "accelerate": "1.15.3", "torch": "2.13.1+cu128", "vllm": None}
    assert versions.untested(same, environments) == {}
    newer = {"transformers": "5.25.0", "accelerate": "1.14.2", "torch": "2.13.0", "vllm": "0.33.0rc1"}
    assert versions.untested(newer, environments) == {
        "transformers": ("5.25.0", "5.19 to 5.24", "transformers>=5.19,<5.25"),
        "accelerate": ("1.14.2", "1.15", "accelerate>=1.15,<1.16"),
        "vllm": ("0.33.0rc1", "0.32", "vllm>=0.32,<0.33"),
    }


def infer(monkeypatch, capsys, tmp_path) -> tuple[int, str, str]:
    return run_main(monkeypatch, capsys, "infer", "--model", str(tmp_path / "model"), "--prompt", "hi", "--max-new-tokens", "2")


def test_a_release_outside_a_compat_modules_range_is_one_warning_per_command_and_the_command_goes_on(monkeypatch, capsys,
                                                                                                       tmp_path, model):
    """huggingface_hub is in no tested environment's record: its range is compat/huggingface_hub.py's VERIFIED."""
    installed_as(monkeypatch, {**recorded(), "huggingface_hub": "2.5.0"})
    for _ in range(2):  # each command says it once, though infer loads the model and runs several steps
        code, _, err = infer(monkeypatch, capsys, tmp_path)
        warnings = [line for line in err.splitlines() if "untested versions" in line]
        assert code == 0 and warnings == ["wemask: warning: untested versions: huggingface_hub 2.5.0 (tested 2.4): wemask may fail "
                                          'inside them; `pip install "huggingface_hub>=2.4,<2.5"` installs the tested ones'], err


def test_a_bad_input_stays_one_line_with_untested_versions(monkeypatch, capsys, tmp_path, model):
    installed_as(monkeypatch, OLD)
    code, _, err = run_main(monkeypatch, capsys, "infer", "--model", str(tmp_path / "missing"), "--prompt", "hi")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "untested" not in err, err


def test_vllm_and_python_ranges_come_from_their_compat_modules(monkeypatch):
    from wemask_cli.compat import argparse as standard_library
    from wemask_cli.compat import vllm
    from wemask_cli.runtime import tested

    installed_as(monkeypatch, {"vllm": "0.40.1", "python": "3.14.0", "trl": "1.16.0"})
    found = tested.untested_versions()
    assert found["vllm"] == ("0.40.1", "0.32", "vllm>=0.32,<0.33") and vllm.VERIFIED["vllm"] == ("0.32", "0.32")
    assert found["python"] == ("3.14.0", "3.10 to 3.13", None) and standard_library.VERIFIED["python"] == ("3.10", "3.13")
    assert tested.install_hint(found).endswith(' "vllm>=0.32,<0.33" and Python 3.10 to 3.13')


def test_every_compat_range_holds_what_the_tested_environments_ran():
    """A compat module's range is what the warning measures its library against: it never leaves out a release
    `make test` ran (the canaries run in both environments)."""
    from wemask_cli.compat.verified import MODULES
    from wemask_cli.runtime.versions import outside

    environments = resources.tested_environments()
    assert {module.__name__.rsplit(".", 1)[1] for module in MODULES} == {
        path.stem for path in (ROOT / "wemask_cli" / "compat").glob("*.py")} - {"__init__", "notices", "verified"}
    for module in MODULES:
        for env in environments.values():
            assert outside(env["versions"], module.VERIFIED) == {}, (module.__name__, env["versions"])


def test_env_names_what_the_warning_names(monkeypatch, capsys):
    installed_as(monkeypatch, {**recorded(), "huggingface_hub": "2.5.0"})
    code, out, _ = run_main(monkeypatch, capsys, "env")
    assert code == 0 and "with untested versions: huggingface_hub 2.5.0 (tested 2.4)" in out
