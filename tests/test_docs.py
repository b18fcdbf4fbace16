"""The documentation is true: every command it shows runs (or, when a page marks it, parses with the real command),
prints what the page says, writes the files and keys the reference lists; every flag it names exists; the site
builds in strict mode (a broken link or a missing page fails); and the README keeps its order and length.

How a page marks its commands: docs/doc_commands.py. The quick start runs once (docs/doc_runs.py) for the docs
build and these tests; every other page's runnable commands run here, in order, in a folder of their own.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

from doc_commands import DocCommand, all_commands, page_commands, pages  # noqa: E402
from doc_runs import QUICKSTART, QUICKSTART_RUN, quickstart, run_commands  # noqa: E402
from doc_tables import commands  # noqa: E402

COMMANDS = all_commands()
QUICK = [c for c in page_commands(QUICKSTART) if c.marker is None]
RUN_ELSEWHERE = [c for c in COMMANDS if c.marker is None and c.page != str(QUICKSTART.relative_to(ROOT))]
# Flags of programs other than wemask that the pages name (launchers, pip, vLLM's server, pytest).
OTHER_PROGRAMS_FLAGS = {
    "--nproc_per_node", "--nnodes", "--node_rank", "--master_addr", "--master_port", "--config_file",
    "--num_processes", "--multi_gpu", "--cpu", "--no-deps", "--local-dir", "--weight-transfer-config",
    "--logprobs-mode", "--max-logprobs", "--install-completion", "--show-completion", "--help", "--version",
    "--change", "--base",  # the duplicates checker CONTRIBUTING.md asks for
    "--toy-note",  # the toy stage plugin's own flag (tests/toy_stage.py), not installed here
    "--load-format",  # vLLM's
}  # fmt: skip


@pytest.fixture(scope="session")
def quick_runs():
    """The quick start's commands and what each printed (the docs build reuses the same run)."""
    return {ran.command.text: ran for ran in quickstart()}


def normalised(text: str) -> str:
    return " ".join(text.split())


def assert_prints_what_the_page_shows(command: DocCommand, output: str) -> None:
    for line in command.output:
        if line != "...":
            assert normalised(line) in normalised(output), f"{command.where()}: `{command.text}` no longer prints {line!r}:\n{output}"


@pytest.mark.embedded
def test_the_quick_start_runs_and_prints_what_it_shows(quick_runs):
    for command in QUICK:
        assert_prints_what_the_page_shows(command, quick_runs[command.text].output)


def pages_run_here() -> list[str]:
    return sorted({c.page for c in RUN_ELSEWHERE})


@pytest.mark.embedded
@pytest.mark.parametrize("page", pages_run_here())
def test_each_pages_commands_run_in_order(page, quick_runs, tmp_path):
    """A command that is the quick start's (the README shows it) is its run; the others run here, in order."""
    mine = [c for c in RUN_ELSEWHERE if c.page == page and c.text not in quick_runs]
    for command in [c for c in RUN_ELSEWHERE if c.page == page and c.text in quick_runs]:
        assert_prints_what_the_page_shows(command, quick_runs[command.text].output)
    assert all(c.wemask_args is not None for c in mine), f"{page}: only wemask commands run; mark the others (docs/doc_commands.py)"
    ran = run_commands(mine, tmp_path / "work")  # stops at the first failure
    for result in ran:
        assert result.code == 0, f"{result.command.where()}: `{result.command.text}` exited {result.code}:\n{result.output}"
        assert_prints_what_the_page_shows(result.command, result.output)
    assert len(ran) == len(mine)


def parse_with_the_real_command(args: list[str], where: str) -> None:
    """Parse `wemask ARGS` as the command would (flags must exist, values must convert), running nothing."""
    name, rest = args[0], args[1:]
    command = commands().get(name)
    assert command is not None, f"{where}: wemask has no command {name!r}"
    try:
        ctx = command.make_context(name, list(rest))
    except Exception as err:  # typer's own click: its UsageError, BadParameter, NoSuchOption
        if not hasattr(err, "format_message"):
            raise
        raise AssertionError(f"{where}: `wemask {shlex.join(args)}`: {err.format_message()}") from None
    values = ctx.params
    if "me_layer" in values:  # the mask flags' values, checked as every command checks them before loading
        from wemask_cli.mask_request.flags import MaskRequest

        rates = values.get("mask_rate", values.get("mask_rates"))
        MaskRequest.parse(rates, *(values.get(k) for k in ("me_layer", "select", "layers", "strength", "tokens")))
    if ctx.args:
        from wemask_cli.train.stage_registry import stage_specs
        from wemask_cli.train.trl_flags import check_extra_args

        own = [n for p in command.params for n in (*p.opts, *p.secondary_opts)]
        check_extra_args(ctx.args, name, stage_specs()[name].trl_config, own)


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


def check_not_wemask(command: DocCommand) -> None:
    """`make T` needs the target; `pip install` its extras and pins in pyproject.toml; other programs a GPU mark."""
    argv = command.argv
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras_section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+) = \[", extras_section, flags=re.M))
    if argv[0] == "make":
        assert set(argv[1:]) <= makefile_targets(), f"{command.where()}: no such make target in {argv[1:]}"
    elif argv[:2] == ["pip", "install"]:
        for spec in (a for a in argv[2:] if not a.startswith("-")):
            for group in re.findall(r"\[([\w,]+)\]", spec):
                assert set(group.split(",")) <= extras, f"{command.where()}: pyproject.toml has no extra {group!r}"
            if "==" in spec:
                assert f'"{spec}"' in extras_section, f"{command.where()}: {spec} is not pyproject's pin"
    else:
        assert command.marker in ("gpu-only", "tested-by"), f"{command.where()}: `{argv[0]}` runs only in a gpu-only or tested-by box"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.marker is not None], ids=DocCommand.where)
def test_marked_commands_parse_and_name_what_exists(command):
    assert command.reason.strip(), f"{command.where()}: a {command.marker} box must say why"
    if command.marker == "tested-by":
        named = re.findall(r"tests/[\w/]+\.py", command.reason)
        assert named and all((ROOT / n).is_file() for n in named), f"{command.where()}: name an existing test file"
    for word in command.argv:
        for path in re.findall(r"^(?:recipes|data)/[\w./-]+$", word):
            assert (ROOT / path).exists(), f"{command.where()}: {path} does not exist"
    if command.wemask_args is None:
        check_not_wemask(command)
    else:
        parse_with_the_real_command(command.wemask_args, command.where())


def known_flags() -> set[str]:
    from wemask_cli.cli import app
    from wemask_cli.train.stage_registry import stage_specs
    from wemask_cli.train.trl_flags import trl_flags
    from wemask_cli.train.trl_vocabulary import ALIASES

    flags = {name for command in commands().values() for p in command.params for name in (*p.opts, *p.secondary_opts)}
    flags |= {name for p in typer.main.get_command(app).params for name in (*p.opts, *p.secondary_opts)}  # `wemask -v`
    for spec in stage_specs().values():
        flags |= set(trl_flags(spec.trl_config) or ())
    flags |= {f"--{alias}" for alias in ALIASES}  # TRL's spellings of wemask's options (--reward_funcs)
    return flags | OTHER_PROGRAMS_FLAGS


def test_every_flag_a_page_names_exists():
    """A flag written in `code` anywhere in the pages (prose, tables, commands) is one some command takes."""
    known = known_flags()
    missing = []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)):
            if flag not in known:
                missing.append(f"{path.relative_to(ROOT)}: {flag}")
    assert not missing, "flags the docs name that no command takes:\n" + "\n".join(sorted(missing))


def output_rows() -> list[tuple[str, list[str]]]:
    """(quick-start path, keys) of each row of the output-files reference that names one."""
    rows = []
    for line in (ROOT / "docs" / "reference" / "outputs.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`runs/quickstart/"):
            rows.append((cells[1].strip("`"), re.findall(r"`([\w.]+)`", cells[2])))
    return rows


@pytest.mark.embedded
def test_the_output_files_and_keys_the_reference_lists_are_written(quick_runs):
    rows = output_rows()
    assert len(rows) >= 10
    for relative, keys in rows:
        path = QUICKSTART_RUN / relative
        assert path.is_file(), f"docs/reference/outputs.md lists {relative}, which the quick start no longer writes"
        if keys:
            written = json.loads(path.read_text())
            assert not set(keys) - set(written), f"{relative} no longer has {sorted(set(keys) - set(written))}"


@pytest.mark.embedded
def test_every_quick_start_file_a_page_names_is_where_it_says(quick_runs):
    """A location a page states (`runs/quickstart/...`: the report's figure, the locate JSON) is where the run wrote it."""
    named = {(page, path) for page in pages() for path in re.findall(r"`(runs/quickstart/[\w./-]*\w)`", page.read_text(encoding="utf-8"))}
    assert len(named) >= 10
    missing = [f"{page.relative_to(ROOT)}: {path}" for page, path in sorted(named) if not (QUICKSTART_RUN / path).exists()]
    assert not missing, "files the pages place where the quick start did not write them:\n" + "\n".join(missing)


@pytest.mark.embedded
def test_the_site_builds_in_strict_mode_with_its_generated_pages(quick_runs, tmp_path):
    """`make docs`'s command: a broken link, a missing page or a failing quick-start command fails it."""
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (site / "reference" / "cli.html").read_text()
    assert all(f"wemask {name}" in cli for name in commands()) and "--gated-norm-rank" in cli and "--ref-mask" in cli
    assert "ME layer 11" in (site / "results" / "quickstart.html").read_text()
    assert (site / "assets" / "figures" / "locate.png").stat().st_size > 10_000
    assert (site / "assets" / "figures" / "report.png").stat().st_size > 10_000
    assert "WeMaskConfig" in (site / "reference" / "python-api.html").read_text()


def test_every_benchmark_has_a_dated_reproducible_record():
    bench = json.loads((ROOT / "docs" / "results" / "bench.json").read_text())
    assert {p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py")} == set(bench)
    for name, figures in bench.items():
        record = figures["measured"]
        assert record["date"] and record["machine"] and record["versions"], name
        assert record["command"] == f"python bench/run.py {name}"


def test_the_readme_says_what_wemask_is_then_installs_then_starts_in_five_commands_then_sweeps():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["Install", "Quick start", "A sweep over the mask rate", "From a checkout", "Documentation"]
    intro = text.split("## Install")[0]
    assert "ME layer" in intro and "2605.08504" in intro and "2601.22966" in intro
    quick = [c for c in page_commands(ROOT / "README.md") if c.marker is None]
    assert [c.wemask_args[0] for c in quick] == ["locate", "infer", "sft", "eval", "report"]
    assert [c.text for c in quick] == [c.text for c in QUICK], "the README's quick start is the quick start page's"
    readme_sweep = [c for c in page_commands(ROOT / "README.md") if c.marker == "tested-by"]
    assert [c.wemask_args[0] for c in readme_sweep][-1] == "report", "the README's sweep trains, evaluates, then reports"
    guide = {c.text for c in page_commands(ROOT / "docs" / "guide" / "sweeps.md")}
    assert {c.text for c in readme_sweep} <= guide, "the README's sweep is the sweeps guide's (docs/guide/sweeps.md)"
