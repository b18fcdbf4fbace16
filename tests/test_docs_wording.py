"""The pages are written for a user who never saw an earlier version, and what they state matches the tool.

Fast, no model: the wording is read from the pages; the defaults, flags, stages and families from the Typer app
and the registries (the same objects `--help` is built from).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

from doc_commands import pages  # noqa: E402
from doc_tables import commands  # noqa: E402

PAGES = [*pages(), ROOT / "ARCHITECTURE.md"]
# What a development log says and a user's page does not: history belongs in commit messages.
CHANGELOG_WORDING = re.compile(
    r"no longer|previously|\(was\b|\bwas:|\bis now\b|\bare now\b|\bnow (?:accepts?|gives|writes|lives?|says)\b|"
    r"used to\b|as before\b|before (?:the|this|these) changes?|to be folded|folded into the readme|"
    r"not done:|noticed, not done|this round|\bthe issue\b|the issue's|\bissue #?\d+|\bthis branch\b|\bon main\b|"
    r"another engineer",
    flags=re.I,
)
# `--flag` ... (default X) / `--flag`, default `X` / `--flag X` (the default) / `--flag X`, the default
FLAG_THEN_TEXT = re.compile(r"`(--[a-z][\w-]*)((?: [^`\s]+)?)`((?:(?!`-)[^\n]){0,60})")
DEFAULT_SAID = re.compile(r"^[^.;]*?(?:(?:\(|, )default:?|\bdefaults to) `?([\w.\-/]+)`?")
VALUE_IS_DEFAULT = re.compile(r"^\s*(?:\(|, |is |— )?(?:the )?default\b")
NOT_A_VALUE = {"in", "inside", "with", "when", "on", "the", "a", "an", "is", "from", "for", "of", "to", "and", "or", "next"}
NO_SUCH_FLAG = re.compile(r"\b(?:has no|there is no|no such) `(-{1,2}[\w-]+)`|\bno `(-{1,2}[\w-]+)` (?:flag|option|switch)")
FAMILY_NAMES = {  # model_type: the name the README and the home page give it
    "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen2/3", "granite": "Granite",
    "phi3": "Phi-3", "gemma2": "Gemma 2", "gemma3": "Gemma 2/3", "gemma3_text": "Gemma 2/3", "qwen2_moe": "Qwen2/3-MoE",
    "qwen3_moe": "Qwen2/3-MoE", "mixtral": "Mixtral", "gpt_oss": "gpt-oss", "deepseek_v3": "DeepSeek-V3",
    "olmo2": "OLMo-2", "cohere2": "Cohere 2",
}  # fmt: skip


def page_name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_page_reads_as_a_development_log():
    found = []
    for path in PAGES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{page_name(path)}:{number}: {m.group(0)!r} in: {line.strip()[:120]}" for m in CHANGELOG_WORDING.finditer(line)]
    assert not found, "say what is, not what changed (history goes to commit messages):\n" + "\n".join(found)


def tool_defaults() -> dict[str, set[str]]:
    """Each flag's default, as the commands apply it, and the defaults its own help states (a flag whose
    default depends on something else: `--window` (default 256), `--me-layer` auto with a rate)."""
    from wemask_cli.cli import app
    from wemask_cli.train.options import TrainOptions
    from wemask_cli.train.stage_registry import stage_specs

    training = {f.name: f.metadata["default"] for f in dataclasses.fields(TrainOptions) if "default" in f.metadata}
    training |= {flag.dest: flag.default for spec in stage_specs().values() for flag in spec.all_flags()}
    defaults: dict[str, set[str]] = {}
    params = [p for command in commands().values() for p in command.params] + typer.main.get_command(app).params
    for param in params:
        values = [param.default, training.get(param.name)]
        said = set(re.findall(r"default:? '?([\w.\-/]+)", param.help or "")) | set(re.findall(r"'?(\w[\w.\-/]*)'? \(default\b", param.help or ""))
        said -= NOT_A_VALUE
        if re.search(r"\bthe default\b", param.help or ""):
            said |= set(re.findall(r"'([\w.\-]+)'", param.help or ""))
        for name in (*param.opts, *getattr(param, "secondary_opts", [])):
            defaults.setdefault(name, set()).update(said, {str(v) for v in values if v not in (None, (), [], False)})
    return defaults


def same_value(said: str, real: set[str]) -> bool:
    for value in real:
        try:
            if float(said) == float(value):
                return True
        except ValueError:
            if said.strip("'\"") == value.strip("'\""):
                return True
    return False


def default_claims(text: str) -> list[tuple[str, str, str]]:
    """(flag, the default the page states, where in the text) for each place a page names a flag's default."""
    claims = []
    for match in FLAG_THEN_TEXT.finditer(text):
        flag, value, after = match.group(1), match.group(2).strip(), match.group(3)
        said = DEFAULT_SAID.match(after)
        if said and said.group(1) not in NOT_A_VALUE:
            claims.append((flag, said.group(1), match.group(0)))
        elif value and VALUE_IS_DEFAULT.match(after):
            claims.append((flag, value, match.group(0)))
    return claims


def test_the_claim_reader_finds_the_forms_pages_use():
    text = ("`--eval-split` (default `test`), `--mode aware` (default), `--window` is the longest input (default 256), "
            "`--base-quantization recorded|none`, default `recorded`, `--me-layer auto` (the default with a rate), "
            "`--output-dir` defaults to `trainer_output`")  # fmt: skip
    assert [(flag, value) for flag, value, _ in default_claims(text)] == [
        ("--eval-split", "test"), ("--mode", "aware"), ("--window", "256"), ("--base-quantization", "recorded"), ("--me-layer", "auto"),
        ("--output-dir", "trainer_output"),
    ]  # fmt: skip
    real = tool_defaults()
    assert not same_value("test", real["--eval-split"]) and same_value("train", real["--eval-split"])
    assert same_value("256", real["--window"]) and same_value("auto", real["--me-layer"])
    assert same_value("trainer_output", real["--output-dir"]) and not same_value("runs", real["--output-dir"])


def test_every_default_a_page_states_is_the_commands():
    real = tool_defaults()
    wrong = []
    for path in PAGES:
        for flag, value, where in default_claims(path.read_text(encoding="utf-8")):
            if flag in real and not same_value(value, real[flag]):
                wrong.append(f"{page_name(path)}: {where!r}: the command's default is {sorted(real[flag]) or 'none'}")
    assert not wrong, "defaults the docs state that the commands do not have:\n" + "\n".join(wrong)


def test_no_page_denies_a_flag_the_command_has():
    real = tool_defaults()
    denied = [(p, m) for p in PAGES for m in NO_SUCH_FLAG.finditer(p.read_text(encoding="utf-8"))]
    wrong = [f"{page_name(p)}: {m.group(0)!r}" for p, m in denied if (m.group(1) or m.group(2)) in real]
    assert not wrong, "pages saying a flag does not exist, which `--help` lists:\n" + "\n".join(wrong)


def intro(path: Path) -> str:
    return re.split(r"^## ", path.read_text(encoding="utf-8"), maxsplit=1, flags=re.M)[0]


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_front_pages_name_every_trainer_and_decoder_family(page):
    from wemask_cli.method.arch import ARCHITECTURES
    from wemask_cli.train.stage_registry import stage_specs

    text = " ".join(intro(ROOT / page).split())
    stages = [name.upper() for name in stage_specs()]
    assert all(re.search(rf"\b{stage}\b", text) for stage in stages), f"{page} names the trainers {stages}"
    unnamed = [kind for kind in ARCHITECTURES if kind not in FAMILY_NAMES or FAMILY_NAMES[kind] not in text]
    assert not unnamed, f"{page}'s introduction does not name {unnamed} (FAMILY_NAMES gives each family's name)"
    families = (ROOT / "docs" / "guide" / "families.md").read_text(encoding="utf-8")
    assert all(kind in families for kind in ARCHITECTURES), "docs/guide/families.md lists every model_type"
