"""A trainer's rollouts come through the Engine protocol: the GRPO stage asks for the `rollouts` feature, the vLLM
engine declares and implements it (engines/vllm/rollouts.py), an engine that does not declare it refuses it in one
line (the toy plugin engine), and no module outside engines/ imports an engine's own modules or names an engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from toy_engine import ToyEngine

from wemask_cli.engines.base import ENGINES, Rollouts, rollout_engine
from wemask_cli.runtime.errors import WeMaskError

PACKAGE = Path(__file__).resolve().parents[1] / "wemask_cli"
SHARED = {"wemask_cli.engines", "wemask_cli.engines.base", "wemask_cli.engines.generation"}  # the protocol, not an engine
# layers that use engines: a string equal to an engine's name there would be a branch on it
USERS = ("train", "eval", "commands", "cli", "data", "models", "interventions", "prompts", "render", "outputs", "mask_request")
LIBRARY_NAMES = {  # the same word naming the library, not the engine (file: why)
    ("cli/__init__.py", "transformers"): "sys.modules: is the transformers library imported already",
    ("train/trl_flags.py", "transformers"): "the distribution whose version keys TRL's flag cache",
}


def imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_no_module_outside_engines_imports_an_engine():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "engines":
            continue
        for line, module in imported_modules(ast.parse(path.read_text())):
            if module.startswith("wemask_cli.engines") and module not in SHARED:
                offenders.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert offenders == []


def test_no_engine_name_is_written_outside_the_engines():
    names = set(ENGINES.builtins())
    found = {}
    for folder in USERS:
        for path in (PACKAGE / folder).rglob("*.py"):
            where = str(path.relative_to(PACKAGE))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.setdefault((where, node.value), node.lineno)
    assert set(found) == set(LIBRARY_NAMES), found


def test_the_rollout_engine_is_the_one_that_declares_rollouts():
    engine = rollout_engine()
    assert engine is not None and "rollouts" in engine.supports
    assert isinstance(engine.rollouts(), Rollouts)
    with ENGINES.restoring():
        ENGINES.register(ToyEngine, source="tests/toy_engine.py")
        assert rollout_engine() is engine  # the toy plugin does not declare rollouts: never chosen for them
        with pytest.raises(WeMaskError) as refused:
            ToyEngine.rollouts()
    assert str(refused.value) == "--use-vllm generates a trainer's rollouts in an engine that declares them; the toy engine does not"


def test_grpo_and_rloo_ask_for_rollouts_by_feature_only():
    """The stages that generate (train/rollout_stage.py, shared by grpo.py and rloo.py) find rollouts by feature."""
    shared = (PACKAGE / "train" / "rollout_stage.py").read_text()
    assert "rollout_engine()" in shared
    for name in ("rollout_stage", "grpo", "rloo"):
        source = (PACKAGE / "train" / f"{name}.py").read_text()
        assert "vllm." not in source.replace("--use-vllm", ""), name
    assert all("RolloutStage" in (PACKAGE / "train" / f"{name}.py").read_text() for name in ("grpo", "rloo"))
