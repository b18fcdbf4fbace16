"""The imports of wemask_cli's modules, read from their AST (tests/test_layers.py judges them).

What counts as an import: `import a.b`, `from a import b` (b resolved to the submodule a.b when there is one),
relative imports of every level (in a package's __init__.py `.` is the package itself), the calls of an import
function (`importlib.import_module`, `__import__`, `importlib.__import__`) by any name it is reached through
(`from importlib import import_module as load`, `il = importlib`, `load = importlib.import_module`,
`getattr(importlib, "import_module")`), and `sys.modules[NAME]` / `sys.modules.get(NAME)` (a module fetched without
an import is still a dependency), anywhere in the file, `if TYPE_CHECKING:` blocks included (marked typing_only).

What cannot be read is refused (a Dynamic record) rather than skipped: an import function called with a name
that is not a constant string (an f-string, a variable; an f-string still counts as an import of the package its
constant prefix names; a top-level constant is read), an import function used as a value (passed, returned),
`getattr` on importlib, builtins or sys with a name that is not a constant, their `__dict__` or `vars()`, any
other use of sys.modules (assigned, iterated, passed), exec, eval and compile, and the loaders that run a file as a
module (importlib.util.spec_from_file_location and module_from_spec, importlib.machinery, importlib.reload, runpy,
pkgutil.resolve_name).

A `Registry(..., package=P, builtin=(M, ...))` built anywhere imports P.M for each M when first read: each is an
import of that module (`loads`: ranked like any import; not a cycle edge, since the loaded module registers into
the registry, depending on it, not the other way). A package or built-in list that is not a constant is refused.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wemask_cli"
IMPORT_FUNCTIONS = ("importlib.import_module", "builtins.__import__", "importlib.__import__")
RUNS_CODE = ("builtins.exec", "builtins.eval", "builtins.compile")
LOADERS = ("importlib.util.spec_from_file_location", "importlib.util.module_from_spec", "importlib.util.spec_from_loader",
           "importlib.machinery", "importlib.reload", "runpy", "zipimport", "pkgutil.resolve_name")
REACHES_IMPORTS = ("importlib", "importlib.util", "builtins", "sys")  # getattr on these with a computed name: refused
BUILTINS = ("__import__", "exec", "eval", "compile")
REGISTRY = "wemask_cli.runtime.registry.Registry"  # builds an extension point that imports its `builtin` modules


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # an absolute dotted name: a wemask_cli module when it is one, else what the code names
    exact: bool = True  # False: an f-string's package prefix
    typing_only: bool = False  # inside `if TYPE_CHECKING:`
    loads: bool = False  # a Registry's built-in module: ranked, not a cycle edge


@dataclass(frozen=True)
class Dynamic:
    line: int
    what: str  # the code, e.g. "importlib.import_module(name)"


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


def watched(qualified: str | None) -> bool:
    """An import function, exec/eval/compile, sys.modules, a loader, or the namespace of a module that reaches them
    (importlib.__dict__, vars(builtins)): what the finder follows or refuses."""
    if qualified is None:
        return False
    return (qualified in IMPORT_FUNCTIONS + RUNS_CODE or qualified == "sys.modules"
            or any(qualified == f"{module}.__dict__" for module in REACHES_IMPORTS)
            or any(qualified == loader or qualified.startswith(f"{loader}.") for loader in LOADERS))


class Names:
    """What each name of a module stands for: the modules and functions its imports and plain assignments bind."""

    def __init__(self, tree: ast.Module, module: Module):
        self.module, self.aliases, self.bound = module, {}, set()
        for node in ast.walk(tree):
            self.bind(node)
        assigned = [t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]
        self.constants = {  # NAME = "a.module" at the top level, never assigned again: its value
            node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            and assigned.count(node.targets[0].id) == 1
        }
        self.tuples = {  # NAME = ("a", "b") at the top level, never assigned again: its strings
            node.targets[0].id: tuple(item.value for item in node.value.elts) for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Tuple) and assigned.count(node.targets[0].id) == 1
            and all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.value.elts)
        }
        for _ in range(2):  # `a = importlib; b = a.import_module`: aliases of aliases
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if (target := self.qualified(node.value)) and (watched(target) or target in REACHES_IMPORTS):
                        self.aliases[node.targets[0].id] = target

    def bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.module or "", node.level, self.module.package) if node.level <= self.depth() else ""
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bound.add(node.name)
        elif isinstance(node, ast.arg):
            self.bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)

    def depth(self) -> int:
        return len(self.module.package.split("."))

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name an expression stands for ('importlib.import_module'), or None."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.bound:
                return None
            return "builtins" if node.id == "__builtins__" else f"builtins.{node.id}" if node.id in BUILTINS else None
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            base, name = self.qualified(node.args[0]), node.args[1]
            if base and isinstance(name, ast.Constant) and isinstance(name.value, str):
                return f"{base}.{name.value}"
        return None


class ImportFinder(ast.NodeVisitor):
    """Every import of one module (Import records) and every way of importing it cannot read (Dynamic records);
    ImportError for a relative import that cannot resolve."""

    def __init__(self, module: Module, known: set[str], names: Names):
        self.module, self.known, self.names = module, known, names
        self.found, self.dynamic, self.typing_only, self.followed = [], [], False, set()

    def add(self, line: int, target: str, exact: bool = True, loads: bool = False) -> None:
        self.found.append(Import(line, target, exact, self.typing_only, loads))

    def refuse(self, node: ast.AST) -> None:
        self.dynamic.append(Dynamic(node.lineno, ast.unparse(node)))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve(node.module or "", node.level, self.module.package)
        for alias in node.names:  # base.name where that is a module, else base
            self.add(node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.known else base)

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test) not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            return self.generic_visit(node)
        self.typing_only = True
        for child in node.body:
            self.visit(child)
        self.typing_only = False
        for child in node.orelse:
            self.visit(child)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, (ast.Name, ast.Attribute, ast.Call)) and self.names.qualified(node.value):
            self.followed.add(id(node.value))  # an alias (Names follows it), not a use
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and self.names.qualified(right) == "sys.modules":
                self.followed.add(id(right))  # `"torch" in sys.modules`: asks, imports nothing
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.names.qualified(node.value) == "sys.modules" and isinstance(node.ctx, ast.Load):
            self.followed.add(id(node.value))
            self.fetch(node, node.slice)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        called = self.names.qualified(node.func)
        if called in IMPORT_FUNCTIONS and node.args:
            self.followed.add(id(node.func))
            self.import_call(node, called)
        elif called == "sys.modules.get" and node.args:
            self.followed.add(id(node.func.value) if isinstance(node.func, ast.Attribute) else id(node.func))
            self.fetch(node, node.args[0])
        elif called == REGISTRY:
            self.registry(node)
        elif called in RUNS_CODE or self.computed_getattr(node) or self.namespace_of(node):
            self.followed.add(id(node.func))
            self.refuse(node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.used(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self.used(node):
            self.generic_visit(node)

    def used(self, node: ast.AST) -> bool:
        """A watched name met as a value (not an import the finder read): refused. True when it was watched."""
        if not watched(self.names.qualified(node)):
            return False
        if id(node) not in self.followed:
            self.refuse(node)
        return True

    def namespace_of(self, node: ast.Call) -> bool:
        """vars(importlib), vars(builtins), vars(sys): a way around every name the finder follows."""
        return (isinstance(node.func, ast.Name) and node.func.id == "vars" and len(node.args) == 1
                and self.names.qualified(node.args[0]) in REACHES_IMPORTS)

    def computed_getattr(self, node: ast.Call) -> bool:
        return (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2
                and self.names.qualified(node.args[0]) in REACHES_IMPORTS and not isinstance(node.args[1], ast.Constant))

    def registry(self, node: ast.Call) -> None:
        """Registry(..., package=P, builtin=(M, ...)): an import of each P.M, or refused when either is not a constant."""
        keywords = {k.arg: k.value for k in node.keywords}
        package = keywords.get("package")
        anchor = self.anchor(package) if package is not None else ""
        listed = keywords.get("builtin")
        if listed is None:
            builtin: tuple = ()
        elif isinstance(listed, ast.Tuple) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in listed.elts):
            builtin = tuple(e.value for e in listed.elts)
        else:
            builtin = self.names.tuples.get(listed.id) if isinstance(listed, ast.Name) else None
        if not anchor or builtin is None:
            return self.refuse(node)
        for module in builtin:
            self.add(node.lineno, f"{anchor}.{module}", loads=True)

    def fetch(self, node: ast.AST, name: ast.AST) -> None:
        """sys.modules[NAME] or sys.modules.get(NAME): an import of NAME when it is a constant, else refused."""
        value, exact = self.literal(name)
        if exact:
            self.add(node.lineno, value)
        else:
            self.refuse(node)

    def import_call(self, node: ast.Call, called: str) -> None:
        name, exact = self.literal(node.args[0])
        if not exact:
            self.refuse(node)
        if name is None:
            return
        keywords = {k.arg: k.value for k in node.keywords}
        if called.endswith("__import__"):
            level_node = node.args[4] if len(node.args) > 4 else keywords.get("level")
            level = level_node.value if isinstance(level_node, ast.Constant) else 0
            anchor = self.module.package
        else:
            level = len(name) - len(name.lstrip("."))
            anchor = self.anchor(node.args[1] if len(node.args) > 1 else keywords.get("package"))
        self.add(node.lineno, resolve(name.lstrip("."), level, anchor).rstrip("."), exact)

    def literal(self, node: ast.AST) -> tuple[str | None, bool]:
        """A constant name or a top-level constant's value (exact), an f-string's constant prefix up to its last dot
        (inexact), or None."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value, True
        if isinstance(node, ast.Name) and node.id in self.names.constants:
            return self.names.constants[node.id], True
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


def imports(module: Module, known: set[str]) -> tuple[list[Import], list[Dynamic]]:
    tree = ast.parse(module.source, module.path)
    finder = ImportFinder(module, known, Names(tree, module))
    finder.visit(tree)
    return finder.found, finder.dynamic


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
