"""The dependency rule (/work/shared/ARCHITECTURE.md), read from the source of every module of wemask_cli.

What counts as an import: `import a.b`, `from a import b` (b resolved to the submodule a.b when there is one, so
`from wemask_cli import cli` is an import of wemask_cli.cli), relative imports of every level (in a package's
__init__.py `.` is the package itself), `importlib.import_module(...)` / `import_module(...)` / `__import__(...)`
with a constant name or an f-string (relative ones anchored at `__package__` or `__name__`; an f-string counts as
an import of the package its constant prefix names), anywhere in the file: top level, functions, classes,
`if TYPE_CHECKING:` blocks. An import whose name is a variable (rewards/loading.py's user reward modules) cannot be
read and is not checked.

Ranks (a module may import its own rank or lower, except as the rules below say):

    6  cli/, render/, __main__    the edge: typer, rich, console output
    5  commands/                  one module per command; never imports another command (its helpers are named
                                  after it: report_settings.py belongs to report.py)
    4  eval/, train/              the machinery of a command family; eval and train never import each other
    3  engines/                   where a forward runs (vLLM); imported only by commands/, eval/ and train/
    2  models, bos, gguf_cache, locate_cache, data/, interventions/, prompts, masking, massive, rewards/
                                  the building blocks eval and train share
    1  outputs/, progress, ranks, finite, hub, model_names, resources/, plugins, registry, cache
                                  plumbing with no knowledge of models or data
    0  method/, the package root  the science (torch only); wemask_cli/__init__.py re-exports it lazily
       compat/, versions          other libraries' internals, each behind a checked name; installed versions
   -1  errors, atomic             imported by every module (the user-facing error family; atomic writes)

Only cli/, render/ and __main__ import rich or typer; render never imports cli. A module without a rank (a new
top-level module or folder) fails the test until it is given one here.

Cycles: the strongly connected components of the graph of exact imports between wemask_cli modules, top-level and
function-level alike (a function-level import that closes a cycle hides a two-way dependency, it does not remove
it); `if TYPE_CHECKING:` imports are left out of this graph, since they never run, and so are f-string imports
(their module is not known). Any component of two or more modules fails the test.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"
RANKS = {
    **dict.fromkeys(("cli", "render", "__main__"), 6),
    "commands": 5,
    **dict.fromkeys(("eval", "train"), 4),
    "engines": 3,
    **dict.fromkeys(("models", "bos", "gguf_cache", "locate_cache", "data", "interventions", "prompts", "masking", "massive",
                     "rewards"), 2),
    **dict.fromkeys(("outputs", "progress", "ranks", "finite", "hub", "model_names", "resources", "plugins", "registry",
                     "cache"), 1),
    **dict.fromkeys(("method", "", "compat", "versions"), 0),
    **dict.fromkeys(("errors", "atomic"), -1),
}
EDGE = ("cli", "render", "__main__")
EDGE_ONLY = ("rich", "typer")
ENGINE_USERS = ("commands", "eval", "train", "engines")
IMPORT_CALLS = ("importlib.import_module", "import_module", "__import__", "importlib.__import__")


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # an absolute dotted name: a wemask_cli module when it is one, else what the code names
    exact: bool = True  # False: an f-string's package prefix
    typing_only: bool = False  # inside `if TYPE_CHECKING:`


@dataclass(frozen=True)
class Module:
    name: str  # wemask_cli.eval.quantize
    path: str  # wemask_cli/eval/quantize/__init__.py
    source: str

    @property
    def package(self) -> str:
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]


def modules_of(files: dict[str, str]) -> dict[str, Module]:
    """{'wemask_cli/a/__init__.py': source, ...} -> the modules by dotted name."""
    found = {}
    for path, source in files.items():
        parts = Path(path).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = Module(name, path, source)
    return found


def tree_files(root: Path = PACKAGE) -> dict[str, str]:
    return {str(path.relative_to(root.parent)): path.read_text() for path in sorted(root.rglob("*.py"))}


def resolve(name: str, level: int, anchor: str) -> str:
    """A relative name (`level` leading dots) against the package `anchor`, as importlib resolves it."""
    if not level:
        return name
    parts = anchor.split(".") if anchor else []
    if level - 1 >= len(parts):
        raise ImportError(f"relative import beyond the top-level package ({'.' * level}{name} in {anchor})")
    base = ".".join(parts[: len(parts) - level + 1])
    return f"{base}.{name}" if name else base


class ImportFinder(ast.NodeVisitor):
    """Every import of one module, as Import records (ImportError for a relative import that cannot resolve)."""

    def __init__(self, module: Module, known: set[str]):
        self.module, self.known, self.found, self.typing_only = module, known, [], False

    def add(self, line: int, target: str, exact: bool = True) -> None:
        self.found.append(Import(line, target, exact, self.typing_only))

    def submodule_or_package(self, line: int, base: str, names: list[str]) -> None:
        """`from base import a, b`: base.a where that is a module, else base."""
        for name in names:
            self.add(line, f"{base}.{name}" if f"{base}.{name}" in self.known else base)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve(node.module or "", node.level, self.module.package)
        self.submodule_or_package(node.lineno, base, [alias.name for alias in node.names])

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self.typing_only = True
            for child in node.body:
                self.visit(child)
            self.typing_only = False
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        if ast.unparse(node.func) not in IMPORT_CALLS or not node.args:
            return
        name, exact = self.literal(node.args[0])
        if name is None:
            return  # a variable: not readable
        keywords = {k.arg: k.value for k in node.keywords}
        if ast.unparse(node.func).endswith("__import__"):
            level_node = node.args[4] if len(node.args) > 4 else keywords.get("level")
            level = level_node.value if isinstance(level_node, ast.Constant) else 0
            anchor = self.module.package
        else:
            level = len(name) - len(name.lstrip("."))
            anchor_node = node.args[1] if len(node.args) > 1 else keywords.get("package")
            anchor = self.anchor(anchor_node)
        self.add(node.lineno, resolve(name.lstrip("."), level, anchor).rstrip("."), exact)

    @staticmethod
    def literal(node: ast.AST) -> tuple[str | None, bool]:
        """A constant name (exact), an f-string's constant prefix up to its last dot (inexact), or None."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value, True
        if isinstance(node, ast.JoinedStr):
            prefix = ""
            for part in node.values:
                if not isinstance(part, ast.Constant):
                    break
                prefix += part.value
            return prefix.rpartition(".")[0] + "." if "." in prefix else None, False
        return None, False

    def anchor(self, node: ast.AST | None) -> str:
        if isinstance(node, ast.Name) and node.id == "__package__":
            return self.module.package
        if isinstance(node, ast.Name) and node.id == "__name__":
            return self.module.name
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def imports(module: Module, known: set[str]) -> list[Import]:
    finder = ImportFinder(module, known)
    finder.visit(ast.parse(module.source, module.path))
    return finder.found


def rank_key(name: str) -> str:
    """wemask_cli.eval.quantize -> eval; wemask_cli -> ''."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def family(name: str) -> str:
    """A command module's family: commands.report_settings -> report (a helper belongs to its command)."""
    return name.split(".")[2].split("_")[0] if name.count(".") >= 2 else ""


def rule_broken(here: str, there: str, exact: bool) -> str | None:
    """Why module `here` may not import wemask_cli module `there`, or None."""
    a, b = rank_key(here), rank_key(there)
    if b not in RANKS:
        return f"{there} has no rank (add its top-level name to RANKS in tests/test_layers.py)"
    if not exact and b == "":
        return "a dynamic import must name its package (wemask_cli.PKG.{...}) to be checked"
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


def layer_violations(mods: dict[str, Module], graph: dict[str, list[Import]]) -> list[str]:
    found = []
    for name, module in mods.items():
        here = rank_key(name)
        if here not in RANKS:
            found.append(f"{module.path}: {name} has no rank (add its top-level name to RANKS in tests/test_layers.py)")
            continue
        for imp in graph[name]:
            where = f"{module.path}:{imp.line} imports {imp.target}"
            top = imp.target.split(".")[0]
            if top in EDGE_ONLY and here not in EDGE:
                found.append(f"{where}: only cli/, render/ and __main__ may import {top}")
            if top == "wemask_cli" and (why := rule_broken(name, imp.target, imp.exact)):
                found.append(f"{where}: {why}")
    return found


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of two or more nodes, each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_cycle(start: str, edges: dict[str, dict[str, str]]) -> list[str]:
    """The shortest path start -> ... -> start (breadth first), as 'file:line -> module' steps."""
    came_from, queue = {}, [start]
    while queue:
        node = queue.pop(0)
        for child, where in sorted(edges[node].items()):
            if child == start:
                steps, back = [f"{where} -> {start}"], node
                while back != start:
                    parent, parent_where = came_from[back]
                    steps.insert(0, f"{parent_where} -> {back}")
                    back = parent
                return steps
            if child not in came_from:
                came_from[child] = (node, where)
                queue.append(child)
    return []


def cycle_violations(mods: dict[str, Module], graph: dict[str, list[Import]]) -> list[str]:
    """One shortest cycle for each strongly connected component of two or more modules."""
    edges = {name: {} for name in mods}
    for name, found in graph.items():
        for i in found:
            if i.exact and not i.typing_only and i.target in mods and i.target != name:
                edges[name].setdefault(i.target, f"{mods[name].path}:{i.line}")
    found = []
    for component in strongly_connected(sorted(mods), {name: set(targets) for name, targets in edges.items()}):
        inside = {name: {t: w for t, w in edges[name].items() if t in component} for name in component}
        cycle = "; ".join(shortest_cycle(component[0], inside))
        found.append(f"import cycle between {', '.join(component)}, e.g. {cycle}")
    return found


def violations(files: dict[str, str] | None = None) -> list[str]:
    """Every broken rule in `files` ({'wemask_cli/...py': source}; default: the package's own files)."""
    mods = modules_of(tree_files() if files is None else files)
    graph, found = {}, []
    for name, module in mods.items():
        try:
            graph[name] = imports(module, set(mods))
        except ImportError as err:
            graph[name] = []
            found.append(f"{module.path}: {err}")
    return found + layer_violations(mods, graph) + cycle_violations(mods, graph)


def test_imports_follow_the_dependency_rule():
    found = violations()
    assert found == [], "\n".join(found)


# ------------------------------------------------------------------------------------------ the checker itself

PLANTED = {
    "wemask_cli/__init__.py": "from .errors import WeMaskError\n",
    "wemask_cli/errors.py": "",
    "wemask_cli/progress.py": "import wemask_cli.cli.app as app\n",
    "wemask_cli/models.py": "def load():\n    from .train import stage\n",
    "wemask_cli/method/__init__.py": "from . import config\n",
    "wemask_cli/method/config.py": "",
    "wemask_cli/commands/__init__.py": "",
    "wemask_cli/commands/locate.py": "from .infer import x\n",
    "wemask_cli/commands/infer.py": "",
    "wemask_cli/commands/report.py": "from .report_settings import keys\n",
    "wemask_cli/commands/report_settings.py": "from ..errors import WeMaskError\n",
    "wemask_cli/masking.py": "def f():\n    from .commands.locate import encode\n    import rich.console\nfrom .prompts import x\n",
    "wemask_cli/prompts.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .masking import MaskRequest\n",
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
    "wemask_cli/method/mask.py": "from ..progress import say\nimport importlib\nf = importlib.import_module(f'wemask_cli.{1}')\n",
}


def test_the_checker_catches_each_kind_of_violation():
    found = "\n".join(violations(PLANTED))
    expected = [
        "commands/locate.py:1 imports wemask_cli.commands.infer: a command may not import another command",
        "masking.py:2 imports wemask_cli.commands.locate: masking (rank 2) may not import commands (rank 5)",
        "masking.py:3 imports rich.console: only cli/, render/ and __main__ may import rich",
        "models.py:2 imports wemask_cli.train.stage: models (rank 2) may not import train (rank 4)",  # in a function
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
        "method/mask.py:1 imports wemask_cli.progress: method (rank 0) may not import progress (rank 1)",
        "method/mask.py:3 imports wemask_cli: a dynamic import must name its package",
        "progress.py:1 imports wemask_cli.cli.app: progress (rank 1) may not import cli (rank 6)",  # plain import
        ("import cycle between wemask_cli.train.run, wemask_cli.train.stage, e.g. wemask_cli/train/run.py:2 -> "
         "wemask_cli.train.stage; wemask_cli/train/stage.py:2 -> wemask_cli.train.run"),
    ]
    missing = [line for line in expected if line not in found]
    assert missing == [], found
    assert "wemask_cli.masking, wemask_cli.prompts" not in found  # a TYPE_CHECKING import never runs: no cycle
    allowed = ("commands/report.py", "report_settings.py", "train/run.py:1", "cli/__init__.py", "render/common.py:1",
               "method/__init__.py", "wemask_cli/__init__.py")
    assert not [line for line in found.splitlines() if any(a in line.split(" imports")[0] for a in allowed)
                and "cycle" not in line], found
