"""One `Registry` for every extension point (eval tasks, interventions, trainer stages, quantization schemes,
engines, data layouts), with one set of rules. Imports nothing heavy.

- An entry is a class (a subclass of the registry's base) or an instance of it, registered by its name.
- The built-ins are the modules in `builtin` (importing one registers what it declares), read in that order: an
  entry is built-in exactly when the module that declares it (`module_of`) is one of them, for every point alike.
- Another package adds entries through the entry-point group `group`: an entry point names a module (importing it
  registers) or an entry itself (registered when it loads). Plugins are loaded once per process, and only when the
  entries are first read (never for `wemask --help`).
- A duplicate name is a `RegistryError` naming both sources; a plugin cannot replace a built-in. Whatever goes wrong
  while a plugin loads (a clash included) is one warning line naming the plugin, which is then left out as a whole.
- `vet` (optional) judges each loaded plugin by its entry point's name and value before it registers: the reason it
  returns is that warning line's reason ('' leaves the plugin out silently, having warned already); None admits it.
- `builtins()` reads the built-in entries alone, loading no plugin (a command of a built-in stage).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Generic, TypeVar

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.plugins import FAILURES, failure, left_out, source_of

T = TypeVar("T")


class RegistryError(ValueError):
    """A registration that breaks the rules: a duplicate name, an entry of the wrong type, a bad declaration."""


def article(noun: str) -> str:
    """'an intervention', 'a Task'."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def origin(entry: object) -> str:
    """Where an entry's class is defined: 'wemask_cli.eval.tasks.math.MathTask'."""
    cls = entry if isinstance(entry, type) else type(entry)
    return f"{cls.__module__}.{cls.__qualname__}"


def same_entry(one: object, other: object) -> bool:
    """The same declaration read twice (a module imported again under importlib), not two entries."""
    if one is other:
        return True
    if isinstance(one, type) and isinstance(other, type):
        return (one.__module__, one.__qualname__) == (other.__module__, other.__qualname__)
    return type(one) is type(other) and one == other


class Registry(Generic[T]):
    """Name -> entry for one extension point.

    `what` names the kind in messages ("eval task"); `flag` is how users name an entry ("--task"); `name_of` reads an
    entry's name (default: its `name` attribute); `check` raises RegistryError for a bad declaration; `module_of`
    names the module that declares an entry (default: its class's), which ranks the built-ins."""

    def __init__(self, what: str, group: str, base: type, *, package: str, builtin: tuple[str, ...] = (),
                 flag: str | None = None, name_of: Callable[[T], str] | None = None,
                 check: Callable[[T], None] | None = None, vet: Callable[[str, object], str | None] | None = None,
                 module_of: Callable[[T], str] | None = None):
        self.what, self.group, self.base, self.package = what, group, base, package
        self.builtin, self.flag, self.check, self.vet = builtin, flag, check, vet
        self.name_of = name_of or (lambda entry: entry.name)
        self.module_of = module_of or (lambda entry: (entry if isinstance(entry, type) else type(entry)).__module__)
        self._entries: dict[str, T] = {}
        self._sources: dict[str, str] = {}
        self._loaded = False

    def register(self, entry: T, source: str | None = None) -> T:
        """Add `entry` (usable as a class decorator); RegistryError for a wrong type, a bad declaration or a taken name."""
        is_entry = issubclass(entry, self.base) if isinstance(entry, type) else isinstance(entry, self.base)
        if not is_entry:
            raise RegistryError(f"{origin(entry)} is registered as {article(self.what)} but is not {article(self.base.__name__)}")
        name = self.name_of(entry)
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{origin(entry)} is registered as {article(self.what)} without a name")
        if self.check is not None:
            self.check(entry)
        where = (source or origin(entry)) + (" (built-in)" if self.is_builtin(entry) else "")
        if name in self._entries and not same_entry(self._entries[name], entry):
            raise RegistryError(f"name clash: {where} registers the {self.what} {name!r}, which is already {self._sources[name]}")
        self._entries[name] = entry
        self._sources.setdefault(name, where)
        return entry

    def builtin_modules(self) -> list[str]:
        """The modules `builtin` names, in its order."""
        return [f"{self.package}.{module}" for module in self.builtin]

    def is_builtin(self, entry: object) -> bool:
        """The one rule: an entry is built-in when the module that declares it is one of `builtin`'s."""
        return self.module_of(entry) in self.builtin_modules()

    def _load_builtins(self) -> None:
        for module in self.builtin:
            importlib.import_module(f"{self.package}.{module}")

    def _load(self) -> None:
        """Import the built-in modules, then once the plugins' entry points; a failing plugin is undone and warned."""
        self._load_builtins()
        if self._loaded:
            return
        self._loaded = True
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group):
            before = (dict(self._entries), dict(self._sources))
            try:
                self._admit(point, point.load())
            except FAILURES as err:
                self._entries, self._sources = before
                left_out(self.what, source_of(point), self.group, f"failed to load: {failure(err)}")

    def _admit(self, point, value) -> None:
        """Register what a plugin's entry point loaded (a module registered on import), unless `vet` refuses it."""
        refused = self.vet(point.name, value) if self.vet is not None else None
        if refused:
            left_out(self.what, source_of(point), self.group, refused)
        elif refused is None and not isinstance(value, ModuleType) and not self.has(value):
            self.register(value, f"{origin(value)} (plugin {source_of(point)})")

    def builtins(self) -> dict[str, T]:
        """The entries wemask declares (in `builtin`'s order), without loading any plugin."""
        self._load_builtins()
        return {name: entry for name, entry in self.registered().items() if self._sources[name].endswith("(built-in)")}

    def registered(self) -> dict[str, T]:
        """The entries registered so far, in `entries()`'s order, loading nothing (for a `check` that compares a new
        entry with the others)."""
        return {name: self._entries[name] for name in sorted(self._entries, key=self._rank)}

    @contextmanager
    def restoring(self) -> Iterator[Registry[T]]:
        """Entries registered inside the block are forgotten after it (a test's toy entries)."""
        self.entries()
        saved = dict(self._entries), dict(self._sources)
        try:
            yield self
        finally:
            self._entries, self._sources = saved

    def has(self, entry: object) -> bool:
        return any(same_entry(known, entry) for known in self._entries.values())

    def entries(self) -> dict[str, T]:
        """Every entry by name: the built-ins in `builtin`'s order, then the plugins' in registration order."""
        self._load()
        return self.registered()

    def _rank(self, name: str) -> int:
        """Built-in modules in `builtin`'s order, then every other entry (plugins') in registration order."""
        modules = self.builtin_modules()
        module = self.module_of(self._entries[name])
        return modules.index(module) if module in modules else len(modules)

    def get(self, name: str) -> T:
        """The entry called `name`; a WeMaskError naming the known ones when there is none."""
        known = self.entries()
        if name not in known:
            asked = f"{self.flag} {name!r}" if self.flag else f"the {self.what} {name!r}"
            raise WeMaskError(f"{asked} is unknown: use one of {', '.join(known) or '(none registered)'}")
        return known[name]

    def source(self, name: str) -> str:
        """Where the entry `name` comes from ('... (built-in)', '... (plugin ...)'); loads the entries unless known."""
        if name not in self._sources:
            self.entries()
        return self._sources[name]

    def __contains__(self, name: str) -> bool:
        return name in self.entries()

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries())
