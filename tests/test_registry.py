"""The one Registry every extension point uses: its rules, on toy entries and real entry points."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

from wemask_cli.runtime.errors import WeMaskError
from wemask_cli.runtime.registry import Registry, RegistryError


class Base:
    name = ""


def toy_registry(**kwargs) -> Registry:
    return Registry("toy", "wemask.test_toys", Base, package="wemask_cli", flag="--toy", **kwargs)


def test_a_duplicate_name_is_one_error_naming_both_sources():
    reg = toy_registry()
    first = reg.register(type("One", (Base,), {"name": "x", "__module__": "pkg_a"}))
    with pytest.raises(RegistryError) as err:
        reg.register(type("Two", (Base,), {"name": "x", "__module__": "pkg_b"}))
    assert "pkg_b.Two" in str(err.value) and "pkg_a.One" in str(err.value)
    assert reg.get("x") is first


def test_the_same_class_read_twice_is_not_a_clash():
    reg = toy_registry()
    cls = type("One", (Base,), {"name": "x", "__module__": "pkg_a"})
    reg.register(cls)
    again = type("One", (Base,), {"name": "x", "__module__": "pkg_a"})
    reg.register(again)
    assert list(reg) == ["x"]


def test_entries_are_checked_against_the_base_and_the_declaration():
    def named_lower(entry):
        if entry.name != entry.name.lower():
            raise RegistryError(f"{entry.name!r} is not lower case")

    reg = toy_registry(check=named_lower)
    with pytest.raises(RegistryError, match="is not a Base"):
        reg.register(type("Stray", (), {"name": "y"}))
    with pytest.raises(RegistryError, match="without a name"):
        reg.register(type("Nameless", (Base,), {}))
    with pytest.raises(RegistryError, match="lower case"):
        reg.register(type("Loud", (Base,), {"name": "LOUD"}))


def test_an_unknown_name_is_one_line_naming_the_known_ones():
    reg = toy_registry()
    reg.register(type("One", (Base,), {"name": "alpha"}))
    with pytest.raises(WeMaskError, match=r"^--toy 'beta' is unknown: use one of alpha$"):
        reg.get("beta")


def test_a_plugin_cannot_replace_a_builtin_and_is_left_out_whole(monkeypatch, capsys):
    builtin = types.ModuleType("wemask_cli._toy_builtin")
    plugin = types.ModuleType("toy_plugin")
    monkeypatch.setitem(sys.modules, builtin.__name__, builtin)
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    reg = Registry("toy", "wemask.test_toys", Base, package="wemask_cli", builtin=("_toy_builtin",))
    builtin_cls = reg.register(type("Builtin", (Base,), {"name": "x", "__module__": "wemask_cli._toy_builtin"}))
    plugin.Fresh = type("Fresh", (Base,), {"name": "fresh", "__module__": "toy_plugin"})
    plugin.Clash = type("Clash", (Base,), {"name": "x", "__module__": "toy_plugin"})
    points = [EntryPoint("fresh", "toy_plugin:Fresh", "wemask.test_toys"),
              EntryPoint("clash", "toy_plugin:Clash", "wemask.test_toys")]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: points if group == reg.group else [])
    assert reg.entries() == {"x": builtin_cls, "fresh": plugin.Fresh}
    warning = capsys.readouterr().err
    assert "clash = 'toy_plugin:Clash'" in warning and "already wemask_cli._toy_builtin.Builtin (built-in)" in warning
    assert warning.count("\n") == 1
    assert "plugin fresh" in reg.source("fresh")
    assert reg.source("x").endswith("(built-in)") and not reg.source("fresh").endswith("(built-in)")


def test_built_in_is_the_builtin_list_for_every_point_never_where_the_code_lives(monkeypatch):
    """A class of a wemask_cli module that `builtin` does not list is no built-in (a prefix rule said it was), and a
    quantization scheme, an instance, is built-in by the module it declares, not by the caller's frame."""
    from wemask_cli.eval.quantize.schemes import SCHEMES, Scheme, register

    monkeypatch.delitem(sys.modules, "toy_quant_scheme", raising=False)
    with SCHEMES.restoring():
        from toy_quant_scheme import TOY

        assert "toy_bf16" not in SCHEMES.builtins() and "toy_bf16" in SCHEMES.registered() and not SCHEMES.is_builtin(TOY)
        posing = Scheme("w2a2", None, None, "a scheme that names no module")
        assert register(posing) is posing and not SCHEMES.is_builtin(posing)

    monkeypatch.setitem(sys.modules, "wemask_cli._toy_builtin", types.ModuleType("wemask_cli._toy_builtin"))
    reg = Registry("toy", "wemask.test_toys", Base, package="wemask_cli", builtin=("_toy_builtin",))
    listed = reg.register(type("Listed", (Base,), {"name": "a", "__module__": "wemask_cli._toy_builtin"}))
    reg.register(type("Elsewhere", (Base,), {"name": "b", "__module__": "wemask_cli.somewhere_else"}))
    assert reg.builtins() == {"a": listed} and list(reg.registered()) == ["a", "b"]
    assert list(SCHEMES.builtins()) == ["none", "w8a8", "w4a8", "w4a4", "fp4"]


def test_no_registry_decides_from_the_callers_frame():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "wemask_cli"
    found = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if re.search(r"currentframe|_getframe|\.f_back|inspect\.stack", path.read_text())]
    assert found == []
