"""The dependency rule (/work/shared/ARCHITECTURE.md), checked twice: on the imports read from the source of every
module of wemask_cli (tests/import_graph.py says what counts; what it cannot read is refused unless the module is in
DYNAMIC_IMPORTS, with why), and on the imports Python really executes while `wemask --help`, `wemask CMD --help`
and an import of every module run in a fresh process (tests/import_audit.py: `__import__` and `import_module`
wrapped, an audit hook on "import", "exec" and "compile", sys.modules checked for modules put there by hand).

Ranks (a module may import its own rank or lower, except as the rules below say):

    6  cli/, render/, __main__    the edge: typer, click, rich, console output
    5  commands/                  one module per command; never imports another command (its helpers are named
                                  after it: report_settings.py belongs to report.py)
    4  eval/, train/              the machinery of a command family; eval and train never import each other
    3  engines/                   where a forward runs (transformers, vLLM); imported only by commands/, eval/, train/
    2  models/, mask_request/, prompts/, data/, interventions/, probes/, rewards/
                                  the building blocks eval and train share
    1  outputs/, resources/, runtime/{progress,ranks,finite,hub,plugins,registry,cache_dir,tested,launch}
                                  plumbing with no knowledge of models or data (never imports safetensors)
    0  method/, the package root  the science (torch only); wemask_cli/__init__.py re-exports it lazily
       compat/, runtime/versions  other libraries' internals, each behind a checked name; installed versions
   -1  runtime/errors, runtime/atomic (and runtime/__init__)
                                  imported by every module (the user-facing error family; atomic writes)

A module's rank is that of the longest dotted prefix RANKS names (runtime.progress, else runtime).
Only cli/, render/ and __main__ import rich, typer or click; only engines/vllm/ and compat/vllm.py (vLLM's internals)
import vllm, and only train/distributed.py imports deepspeed; render never imports cli. A `Registry` built over a
package imports its built-in modules: those imports are ranked too. A module without a rank (a
new top-level module or folder) fails the test until it is given one here. An f-string import counts as an import
of every module under the package its constant prefix names, for the ranks and for the cycles.

Cycles: the strongly connected components of the graph of imports between wemask_cli modules, top-level,
function-level and `if TYPE_CHECKING:` alike (a function-level or typing-only import that closes a cycle hides a
two-way dependency, it does not remove it), with the imports Python really ran added, and with the package
__init__ each import runs first: importing wemask_cli.a.b from outside wemask_cli.a runs wemask_cli/a/__init__.py.
Any component of two or more modules fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from import_graph import PACKAGE, Dynamic, Import, Module, imports, modules_of, shortest_cycle, strongly_connected, tree_files

RANKS = {
    **dict.fromkeys(("cli", "render", "__main__"), 6),
    "commands": 5,
    **dict.fromkeys(("eval", "train"), 4),
    "engines": 3,
    **dict.fromkeys(("models", "mask_request", "prompts", "data", "interventions", "probes", "rewards"), 2),
    **dict.fromkeys(("outputs", "resources", "runtime.progress", "runtime.ranks", "runtime.finite", "runtime.hub",
                     "runtime.plugins", "runtime.registry", "runtime.cache_dir", "runtime.tested", "runtime.launch"), 1),
    **dict.fromkeys(("method", "", "compat", "runtime.versions"), 0),
    **dict.fromkeys(("runtime", "runtime.errors", "runtime.atomic"), -1),
}
EDGE = ("cli", "render", "__main__")
EDGE_ONLY = ("rich", "typer", "click")
ENGINE_ONLY = {  # an optional engine's package: the only modules that import it
    "vllm": ("engines.vllm", "compat.vllm"),
    "deepspeed": ("train.distributed",),
}
ENGINE_USERS = ("commands", "eval", "train", "engines")
MODEL_FILES = ("safetensors",)  # a model's weight files: read from models/ up, never by the plumbing (rank 1; the method
# (rank 0) saves and reads only its own tensors, the massive direction of select='direction')
DYNAMIC_IMPORTS = {  # the only modules that may import by a computed name, and why (what they name is still ranked)
    "wemask_cli/method/__init__.py": "lazy exports: each name's module comes from the package's own _EXPORTS table",
    "wemask_cli/rewards/loading.py": "the user's reward functions (--reward-funcs FILE.py:fn or MODULE:fn): user code, "
                                     "by the name the user gives",
    "wemask_cli/runtime/registry.py": "an extension point's built-in modules (by the names it lists) and its plugins' entry points",
    "wemask_cli/train/stage_registry.py": "a stage's 'module:Class', imported only when its command runs (so that "
                                          "`wemask --help` reads the torch-free StageSpec alone)",
}


def rank_key(name: str) -> str:
    """The longest prefix RANKS names: wemask_cli.eval.quantize -> eval, wemask_cli.runtime.ranks -> runtime.ranks,
    wemask_cli -> ''; an unranked module's top-level name."""
    parts = name.split(".")[1:]
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in RANKS:
            return ".".join(parts[:end])
    return parts[0] if parts else ""


def family(name: str) -> str:
    """A command module's family: commands.report_settings -> report (a helper belongs to its command)."""
    return name.split(".")[2].split("_")[0] if name.count(".") >= 2 else ""


def rule_broken(here: str, there: str) -> str | None:
    """Why module `here` may not import wemask_cli module `there`, or None."""
    a, b = rank_key(here), rank_key(there)
    if b not in RANKS:
        return f"{there} has no rank (add its top-level name to RANKS in tests/test_layers.py)"
    if RANKS[b] > RANKS[a]:
        return f"{a or 'the package root'} (rank {RANKS[a]}) may not import {b} (rank {RANKS[b]})"
    if a == "render" and b == "cli":
        return "render may not import cli"
    if a == b == "commands" and family(here) != family(there) and family(there):
        return "a command may not import another command"
    if {a, b} == {"eval", "train"}:
        return "eval and train never import each other"
    if b == "engines" and a not in ENGINE_USERS:
        return "only commands/, eval/ and train/ import engines/"
    return None


def import_broken(here: str, imp: Import, known: set[str]) -> str | None:
    """Why an import breaks a rule: an f-string's package stands for every module under it."""
    if imp.exact:
        return rule_broken(here, imp.target)
    if rank_key(imp.target) == "":
        return "a dynamic import must name its package (wemask_cli.PKG.{...}) to be checked"
    members = [m for m in sorted(known) if m == imp.target or m.startswith(f"{imp.target}.")] or [imp.target]
    return next((why for member in members if (why := rule_broken(here, member))), None)


def third_party_broken(here: str, target: str) -> str | None:
    top, inside = target.split(".")[0], here.removeprefix("wemask_cli.")
    if top in EDGE_ONLY and rank_key(here) not in EDGE:
        return f"only cli/, render/ and __main__ may import {top}"
    if top in MODEL_FILES and RANKS.get(rank_key(here), 2) == 1:
        return f"{rank_key(here) or 'the package root'} (rank {RANKS[rank_key(here)]}) reads no model files ({top}): models/ does"
    owners = ENGINE_ONLY.get(top, ())
    if owners and not any(inside == owner or inside.startswith(f"{owner}.") for owner in owners):
        return f"only {' and '.join(o.replace('.', '/') + ('/' if o == 'engines.vllm' else '.py') for o in owners)} import {top}"
    return None


def layer_violations(mods: dict[str, Module], graph: dict[str, list[Import]], dynamic: dict[str, list[Dynamic]]) -> list[str]:
    found = []
    for name, module in mods.items():
        if rank_key(name) not in RANKS:
            found.append(f"{module.path}: {name} has no rank (add its top-level name to RANKS in tests/test_layers.py)")
            continue
        for imp in graph[name]:
            where = f"{module.path}:{imp.line} imports {imp.target}"
            if why := third_party_broken(name, imp.target):
                found.append(f"{where}: {why}")
            if imp.target.split(".")[0] == "wemask_cli" and (why := import_broken(name, imp, set(mods))):
                found.append(f"{where}: {why}")
        if module.path not in DYNAMIC_IMPORTS:
            found += [f"{module.path}:{d.line} {d.what}: a dynamic import (its module cannot be read): import by a "
                      f"constant name, or add {module.path} to DYNAMIC_IMPORTS in tests/test_layers.py with why"
                      for d in dynamic[name]]
    return found


def runs_first(here: str, target: str, mods) -> list[str]:
    """The package __init__ modules an import of `target` from `here` runs (those `here` is not inside already)."""
    parts = target.split(".")
    ancestors = (".".join(parts[:i]) for i in range(1, len(parts)))
    return [p for p in ancestors if p in mods and here != p and not here.startswith(f"{p}.")]


def import_edges(mods, graph: dict[str, list[Import]], executed: list) -> dict[str, dict[str, str]]:
    """{module: {module it imports: where}}: read and executed imports, and the package __init__ each runs first."""
    edges = {name: {} for name in mods}
    found = [(name, target, f"{mods[name].path}:{i.line}") for name, imps in graph.items() for i in imps if not i.loads
             for target in ([i.target] if i.exact else [m for m in mods if m.startswith(f"{i.target}.")])]
    found += [(here, there, f"{here} at run time ({how})") for here, there, how in executed if here in mods]
    for here, there, where in found:
        for target in runs_first(here, there, mods) + [there]:
            if target in mods and target != here:
                edges[here].setdefault(target, where if target == there else f"{where} (running {target}/__init__.py)")
    return edges


def cycle_violations(mods, graph: dict[str, list[Import]], executed: list) -> list[str]:
    """One shortest cycle for each strongly connected component of two or more modules."""
    edges = import_edges(mods, graph, executed)
    found = []
    for component in strongly_connected(sorted(mods), {name: set(targets) for name, targets in edges.items()}):
        inside = {name: {t: w for t, w in edges[name].items() if t in component} for name in component}
        cycle = "; ".join(shortest_cycle(component[0], inside))
        found.append(f"import cycle between {', '.join(component)}, e.g. {cycle}")
    return found


def loaded_by_name(audit: dict, mods: dict[str, Module]) -> set[tuple[str, str]]:
    """The run-time imports a DYNAMIC_IMPORTS module made by a computed name (a registry loading its built-ins at the
    first lookup, the user's reward module), with the packages they ran first: the loaded module depends on the
    loader, not the other way, so these are neither ranked nor cycle edges (the loader is reviewed, and named, in
    DYNAMIC_IMPORTS)."""
    allowed = {name for name, module in mods.items() if module.path in DYNAMIC_IMPORTS}
    named = {(here, there) for here, there, how in audit["edges"] if how == "import_module" and here in allowed}
    return {(here, there) for here, there, _ in audit["edges"]
            if any(here == h and (there == t or t.startswith(f"{there}.")) for h, t in named)}


def executed_edges(audit: dict, mods: dict[str, Module]) -> list[tuple[str, str, str]]:
    by_name = loaded_by_name(audit, mods)
    return [(here, there, how) for here, there, how in audit["edges"] if (here, there) not in by_name]


def runtime_violations(audit: dict, mods: dict[str, Module]) -> list[str]:
    """The rules applied to the imports Python ran (tests/import_audit.py), and any exec/eval/compile they ran."""
    found = []
    for here, there, how in executed_edges(audit, mods):
        why = third_party_broken(here, there) or (rule_broken(here, there) if there.split(".")[0] == "wemask_cli" else None)
        if why:
            found.append(f"{here} imported {there} at run time ({how}): {why}")
    found += [f"{here} ran {event}() at run time: code the import checks cannot read" for here, event in audit["execs"]]
    return found + [f"{name} was put in sys.modules by hand: no module file holds it" for name in audit.get("planted", ())]


def violations(files: dict[str, str] | None = None, audit: dict | None = None) -> list[str]:
    """Every broken rule in `files` ({'wemask_cli/...py': source}; default: the package's own files), with the
    imports an audit run saw (tests/import_audit.py's report) when one is given."""
    mods = modules_of(tree_files() if files is None else files)
    audit = audit or {"edges": [], "execs": []}
    graph, dynamic, found = {}, {}, []
    for name, module in mods.items():
        try:
            graph[name], dynamic[name] = imports(module, set(mods))
        except ImportError as err:
            graph[name], dynamic[name] = [], []
            found.append(f"{module.path}: {err}")
    found += layer_violations(mods, graph, dynamic) + runtime_violations(audit, mods)
    return found + cycle_violations(mods, graph, executed_edges(audit, mods))


@cache
def audit_of(root: str, with_help: bool = True) -> dict:
    """Run tests/import_audit.py on the wemask_cli package under `root`, in a fresh process."""
    script = str(Path(__file__).with_name("import_audit.py"))
    done = subprocess.run([sys.executable, script, root] + (["--help"] if with_help else []), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_imports_follow_the_dependency_rule():
    audit = audit_of(str(PACKAGE.parent))
    found = violations(audit=audit)
    assert found == [], "\n".join(found)


def test_the_allowances_hold_only_what_is_still_needed():
    mods = modules_of(tree_files())
    dynamic = {module.path for module in mods.values() if imports(module, set(mods))[1]}
    assert sorted(set(DYNAMIC_IMPORTS) - dynamic) == []  # a module that no longer imports by a computed name


def test_the_audit_sees_the_help_paths_and_every_module():
    audit = audit_of(str(PACKAGE.parent))
    edges = {(here, there) for here, there, _ in audit["edges"]}
    assert ("wemask_cli.cli", "typer") in edges and ("wemask_cli.cli.eval", "wemask_cli.cli.eval_flags") in edges
    importers = {here for here, _ in edges}
    assert len(importers) > 0.9 * len([m for m in modules_of(tree_files()) if m != "wemask_cli.__main__"]), importers


# ------------------------------------------------------------------------------------------ the checker itself

PLANTED = {
    "wemask_cli/__init__.py": "from .runtime.errors import WeMaskError\n",
    "wemask_cli/runtime/__init__.py": "",
    "wemask_cli/runtime/errors.py": "",
    "wemask_cli/runtime/progress.py": "import wemask_cli.cli.app as app\n",
    "wemask_cli/runtime/finite.py": "def f():\n    from safetensors import safe_open\n",
    "wemask_cli/models/__init__.py": "",
    "wemask_cli/models/loading.py": "def load():\n    from ..train import stage\n",
    "wemask_cli/method/__init__.py": "from . import config\n",
    "wemask_cli/method/config.py": "",
    "wemask_cli/commands/__init__.py": "",
    "wemask_cli/commands/locate.py": "from .infer import x\n",
    "wemask_cli/commands/infer.py": "",
    "wemask_cli/commands/report.py": "from .report_settings import keys\n",
    "wemask_cli/commands/report_settings.py": "from ..runtime.errors import WeMaskError\n",
    "wemask_cli/mask_request/__init__.py": "",
    "wemask_cli/mask_request/flags.py": "def f():\n    from ..commands.locate import encode\n    import rich.console\nfrom ..prompts import x\n",
    "wemask_cli/prompts/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..mask_request.flags import MaskRequest\n",
    "wemask_cli/data/__init__.py": "from .. import cli\n",
    "wemask_cli/data/readers.py": "import importlib\nimportlib.import_module('wemask_cli.render.common')\n",
    "wemask_cli/data/columns.py": "__import__('wemask_cli.commands.eval')\n",
    "wemask_cli/data/formats.py": "from importlib import import_module\nm = import_module('..eval', __package__)\n",
    "wemask_cli/data/folders.py": "import importlib\ndef f(x):\n    return importlib.import_module(f'wemask_cli.train.{x}')\n",
    "wemask_cli/data/verl.py": "from wemask_cli import commands\n",
    "wemask_cli/data/deep/__init__.py": "from ... import render\n",
    "wemask_cli/data/deep/far.py": "from .... import outside\n",
    "wemask_cli/eval/__init__.py": "from ..train import run\n",
    "wemask_cli/render/tasks.py": "from ..engines import vllm\n",
    "wemask_cli/train/__init__.py": "",
    "wemask_cli/train/run.py": "from wemask_cli.engines import vllm\nfrom .stage import Stage\n",
    "wemask_cli/train/stage.py": "def f():\n    from . import run\n",
    "wemask_cli/engines/__init__.py": "",
    "wemask_cli/engines/vllm.py": "",
    "wemask_cli/render/__init__.py": "",
    "wemask_cli/render/common.py": "import rich\nfrom ..cli import app\n",
    "wemask_cli/cli/__init__.py": "import typer\nfrom ..commands import locate\napp = 1\n",
    "wemask_cli/newthing.py": "",
    "wemask_cli/method/wemask_hook.py": "from ..runtime.progress import say\nimport importlib\nf = importlib.import_module(f'wemask_cli.{1}')\n",
}


def test_the_checker_catches_each_kind_of_violation():
    found = "\n".join(violations(PLANTED))
    expected = [
        "commands/locate.py:1 imports wemask_cli.commands.infer: a command may not import another command",
        "mask_request/flags.py:2 imports wemask_cli.commands.locate: mask_request (rank 2) may not import commands (rank 5)",
        "mask_request/flags.py:3 imports rich.console: only cli/, render/ and __main__ may import rich",
        "models/loading.py:2 imports wemask_cli.train.stage: models (rank 2) may not import train (rank 4)",  # in a function
        "data/__init__.py:1 imports wemask_cli.cli: data (rank 2) may not import cli",  # `from .. import x` in __init__
        "data/readers.py:2 imports wemask_cli.render.common: data (rank 2) may not import render",  # importlib
        "data/columns.py:1 imports wemask_cli.commands.eval: data (rank 2) may not import commands",  # __import__
        "data/formats.py:2 imports wemask_cli.eval: data (rank 2) may not import eval",  # relative import_module
        "data/folders.py:3 imports wemask_cli.train: data (rank 2) may not import train",  # an f-string's package
        "data/verl.py:1 imports wemask_cli.commands: data (rank 2) may not import commands",  # from wemask_cli import
        "data/deep/__init__.py:1 imports wemask_cli.render: data (rank 2) may not import render",  # three dots
        "data/deep/far.py: relative import beyond the top-level package",
        "eval/__init__.py:1 imports wemask_cli.train.run: eval and train never import each other",
        "render/tasks.py:1 imports wemask_cli.engines.vllm: only commands/, eval/ and train/ import engines/",
        "render/common.py:2 imports wemask_cli.cli: render may not import cli",
        "newthing.py: wemask_cli.newthing has no rank",
        "method/wemask_hook.py:1 imports wemask_cli.runtime.progress: method (rank 0) may not import runtime.progress (rank 1)",
        "method/wemask_hook.py:3 imports wemask_cli: a dynamic import must name its package",
        "runtime/progress.py:1 imports wemask_cli.cli.app: runtime.progress (rank 1) may not import cli (rank 6)",  # plain
        "runtime/finite.py:2 imports safetensors: runtime.finite (rank 1) reads no model files (safetensors): models/ does",
        ("import cycle between wemask_cli.train.run, wemask_cli.train.stage, e.g. wemask_cli/train/run.py:2 -> "
         "wemask_cli.train.stage; wemask_cli/train/stage.py:2 -> wemask_cli.train.run"),
    ]
    missing = [line for line in expected if line not in found]
    assert missing == [], found
    assert "import cycle between wemask_cli.mask_request.flags, wemask_cli.prompts" in found  # closed under TYPE_CHECKING
    allowed = ("commands/report.py", "report_settings.py", "train/run.py:1", "cli/__init__.py", "render/common.py:1",
               "method/__init__.py", "wemask_cli/__init__.py")
    assert not [line for line in found.splitlines() if any(a in line.split(" imports")[0] for a in allowed)
                and "cycle" not in line], found


# Nine ways a module once slipped past the checker: each must be flagged.
EVASIONS = {
    "wemask_cli/__init__.py": "",
    "wemask_cli/commands/__init__.py": "",
    "wemask_cli/commands/infer.py": "",
    "wemask_cli/commands/locate.py": "import importlib\ndef run(name):\n    return importlib.import_module(f'wemask_cli.commands.{name}')\n",
    "wemask_cli/data/__init__.py": "",
    "wemask_cli/data/readers.py": "from importlib import import_module as load\nload('wemask_cli.train.run')\n",
    "wemask_cli/data/columns.py": "import importlib\ngetattr(importlib, 'import_module')('wemask_cli.eval.sweep')\n",
    "wemask_cli/data/formats.py": "exec('from wemask_cli.cli import app')\n",
    "wemask_cli/data/folders.py": "import sys\ndef f():\n    return sys.modules['wemask_cli.commands.infer'].run\n",
    "wemask_cli/data/mixture.py": "import importlib\nTARGET = 'wemask_cli.train.run'\nimportlib.import_module(TARGET)\n"
                                  "def f(name):\n    return importlib.import_module(name)\n",
    "wemask_cli/mask_request/__init__.py": "",
    "wemask_cli/mask_request/flags.py": "import click\n",
    "wemask_cli/prompts/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..models.bos import Bos\n",
    "wemask_cli/models/__init__.py": "",
    "wemask_cli/models/bos.py": "from ..prompts import render\n",
    "wemask_cli/models/loading.py": "from ..interventions.saved import load\n",
    "wemask_cli/interventions/__init__.py": "from .registry import register\n",
    "wemask_cli/interventions/registry.py": "def register():\n    from ..models.loading import load\n",
    "wemask_cli/interventions/saved.py": "",
    "wemask_cli/train/__init__.py": "",
    "wemask_cli/train/run.py": "",
    "wemask_cli/eval/__init__.py": "",
    "wemask_cli/eval/sweep.py": "",
    "wemask_cli/cli/__init__.py": "",
}


@pytest.mark.parametrize("expected", [
    # an f-string import of another command: refused, and its package's commands ranked
    "commands/locate.py:3 importlib.import_module(f'wemask_cli.commands.{name}'): a dynamic import",
    "commands/locate.py:3 imports wemask_cli.commands: a command may not import another command",
    "data/readers.py:2 imports wemask_cli.train.run: data (rank 2) may not import train",  # from importlib ... as load
    "data/columns.py:2 imports wemask_cli.eval.sweep: data (rank 2) may not import eval",  # getattr(importlib, ...)
    "data/formats.py:1 exec('from wemask_cli.cli import app'): a dynamic import",  # exec
    "data/folders.py:3 imports wemask_cli.commands.infer: data (rank 2) may not import commands",  # sys.modules[...]
    "data/mixture.py:3 imports wemask_cli.train.run: data (rank 2) may not import train",  # a constant in a variable
    "data/mixture.py:5 importlib.import_module(name): a dynamic import",  # a name only known at run time
    "mask_request/flags.py:1 imports click: only cli/, render/ and __main__ may import click",
    "import cycle between wemask_cli.models.bos, wemask_cli.prompts",  # closed under TYPE_CHECKING
    # through a package __init__: models imports interventions.saved, which runs interventions/__init__.py first
    "import cycle between wemask_cli.interventions, wemask_cli.interventions.registry, wemask_cli.models.loading, e.g. "
    "wemask_cli/interventions/__init__.py:1 -> wemask_cli.interventions.registry; wemask_cli/interventions/registry.py:2"
    " -> wemask_cli.models.loading; wemask_cli/models/loading.py:1 (running wemask_cli.interventions/__init__.py) -> "
    "wemask_cli.interventions",
])
def test_the_checker_sees_through_each_evasion(expected):
    found = violations(EVASIONS)
    assert [line for line in found if expected in line], "\n".join(found)


def test_every_other_way_around_is_refused():
    ways = ["importlib.__dict__['import_module']('wemask_cli.cli')", "vars(importlib)['import_module']('wemask_cli.cli')",
            "getattr(importlib, 'import_' + 'module')('wemask_cli.cli')", "map(importlib.import_module, ['wemask_cli.cli'])",
            "importlib.util.module_from_spec(spec)", "__builtins__.__import__(name)", "il.import_module(name)",
            "sys.modules.setdefault('wemask_cli.cli', None)", "pkgutil.resolve_name('wemask_cli.cli:app')", "eval('1')"]
    for way in ways:
        source = f"import importlib, importlib.util, pkgutil, sys\nimport importlib as il\n{way}\n"
        found = violations({"wemask_cli/data/readers.py": source, "wemask_cli/data/__init__.py": ""})
        assert any("data/readers.py:3" in line and "a dynamic import" in line for line in found), (way, found)


def test_an_allowed_dynamic_import_is_still_ranked():
    files = {"wemask_cli/rewards/loading.py": "import importlib\nimportlib.import_module(f'wemask_cli.cli.{x}')\n",
             "wemask_cli/cli/__init__.py": ""}
    assert violations(files) == ["wemask_cli/rewards/loading.py:2 imports wemask_cli.cli: rewards (rank 2) may not import cli (rank 6)"]


# What the static reader cannot resolve, the audit of a real run catches: a package of planted modules, imported.
AT_RUN_TIME = {
    "wemask_cli/__init__.py": "",
    "wemask_cli/commands/__init__.py": "",
    "wemask_cli/commands/infer.py": "",
    "wemask_cli/commands/locate.py": "import importlib\nimportlib.import_module('.'.join(['wemask_cli', 'commands', 'infer']))\n",
    "wemask_cli/data/__init__.py": "",
    "wemask_cli/data/readers.py": "exec('import wemask_cli.train.run')\n",
    "wemask_cli/data/columns.py": "import importlib\ngetattr(importlib, 'import_' + 'module')('wemask_cli.eval.sweep')\n",
    "wemask_cli/mask_request/__init__.py": "",
    "wemask_cli/mask_request/flags.py": "name = 'click'\nname = name + ''\n__import__(name)\n",
    "wemask_cli/prompts/__init__.py": "import sys, types\nsys.modules['wemask_cli.ghost'] = types.ModuleType('wemask_cli.ghost')\n",
    "wemask_cli/train/__init__.py": "",
    "wemask_cli/train/run.py": "",
    "wemask_cli/eval/__init__.py": "",
    "wemask_cli/eval/sweep.py": "",
}


def test_the_audit_catches_what_really_ran(tmp_path):
    for path, source in AT_RUN_TIME.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source)
    audit = audit_of(str(tmp_path), with_help=False)
    assert audit["failed"] == {}, audit["failed"]
    found = "\n".join(runtime_violations(audit, modules_of(AT_RUN_TIME)))
    for expected in (
        "wemask_cli.commands.locate imported wemask_cli.commands.infer at run time (import_module): a command may not import another command",
        "wemask_cli.data.readers imported wemask_cli.train.run at run time (import): data (rank 2) may not import train",
        "wemask_cli.data.readers ran exec() at run time",
        "wemask_cli.data.columns imported wemask_cli.eval.sweep at run time (import_module): data (rank 2) may not import eval",
        "wemask_cli.mask_request.flags imported click at run time (import): only cli/, render/ and __main__ may import click",
        "wemask_cli.mask_request.flags imported click at run time (audit): only cli/, render/ and __main__ may import click",
        "wemask_cli.ghost was put in sys.modules by hand",
    ):
        assert expected in found, found
    static = "\n".join(violations(AT_RUN_TIME))  # and the reader refuses each of them
    assert all(f"{path}:" in static for path in ("commands/locate.py", "data/readers.py", "data/columns.py",
                                                "mask_request/flags.py", "prompts/__init__.py")), static


# The holes an honest contributor could fall through: each must be flagged.
HOLES = {
    "wemask_cli/__init__.py": "",
    "wemask_cli/runtime/__init__.py": "",
    "wemask_cli/runtime/registry.py": "class Registry:\n    pass\n",
    "wemask_cli/data/__init__.py": "",
    "wemask_cli/data/layouts.py": ("from wemask_cli.runtime.registry import Registry\n"
                                   "R = Registry('x', 'g', object, package='wemask_cli.train', builtin=('run',))\n"),
    "wemask_cli/data/readers.py": "from wemask_cli.runtime.registry import Registry\nR = Registry('x', 'g', object, package=P)\n",
    "wemask_cli/train/__init__.py": "",
    "wemask_cli/train/run.py": "from wemask_cli.eval import cycle\n",
    "wemask_cli/eval/__init__.py": "",
    "wemask_cli/eval/cycle.py": "import importlib\ndef f(n):\n    return importlib.import_module(f'wemask_cli.train.{n}')\n",
    "wemask_cli/models/__init__.py": "",
    "wemask_cli/models/loading.py": "import vllm\nfrom deepspeed import zero\n",
}


@pytest.mark.parametrize("expected", [
    # a registry over a higher layer imports it
    "data/layouts.py:2 imports wemask_cli.train.run: data (rank 2) may not import train (rank 4)",
    "data/readers.py:2 Registry('x', 'g', object, package=P): a dynamic import",  # a package it cannot read
    # an f-string import closes a cycle
    "import cycle between wemask_cli.eval.cycle, wemask_cli.train.run",
    "models/loading.py:1 imports vllm: only engines/vllm/ and compat/vllm.py import vllm",
    "models/loading.py:2 imports deepspeed: only train/distributed.py import deepspeed",
])
def test_the_checker_closes_each_hole(expected):
    found = violations(HOLES)
    assert [line for line in found if expected in line], "\n".join(found)
