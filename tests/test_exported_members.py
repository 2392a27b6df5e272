"""Every package's public surface, both ways (httpx's ``test_exported_members`` habit):
what ``__all__`` names exists, what a package defines or re-exports is in ``__all__``,
and one name means one thing across all of codegym.

A package that loads names on first use (``codegym._lazy``) writes them once, in its
``_LAZY`` table; ``__all__`` and ``__dir__`` come from it, and the ``if TYPE_CHECKING:``
imports that type checkers read must name exactly the table's names from exactly its
modules (checked here from the source), so the copies cannot drift.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

import codegym
from codegym._lazy import lazy_package

# the jail's own files (standard library only, run by the jail's Python) and entry points
SKIP = ("_zygote", "_harness", "_stdio", "_serve", "_judge", "_plain", "__main__")


def _modules() -> list[ModuleType]:
    out = [codegym]
    for info in pkgutil.walk_packages(codegym.__path__, "codegym."):
        if not any(part in SKIP for part in info.name.split(".")):
            out.append(importlib.import_module(info.name))
    return out


MODULES = _modules()
PACKAGES = [m for m in MODULES if hasattr(m, "__path__") and hasattr(m, "__all__")]
# every module with a module-level ``__getattr__`` (PEP 562) is a lazy package
LAZY = [m for m in MODULES if "__getattr__" in vars(m)]
NAMES = {m.__name__ for m in MODULES}
# a lazy name that is also its own module's name: the package attribute is the function
# until something imports the submodule, which rebinds it (``from codegym.evals import
# compare`` then gives the module). Comes off when one of the two is renamed.
SHADOWED = {("codegym.evals", "compare")}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda m: m.__name__)
def test_all_names_resolve_and_everything_public_is_in_all(package: ModuleType) -> None:
    exported = set(package.__all__)
    assert len(exported) == len(package.__all__), "a name twice in __all__"
    for name in exported:
        assert getattr(package, name, None) is not None or name == "__version__", name
    public = {
        name
        for name, obj in vars(package).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", "").startswith("codegym")
        and obj is not lazy_package  # the machinery that loads the names
    }
    missing = public - exported
    assert not missing, f"{package.__name__} exposes {sorted(missing)} without __all__"


def test_the_lazy_packages_are_found() -> None:
    names = {m.__name__ for m in LAZY}
    known = {"evals", "policies", "sandbox.images", "service", "testing"}
    assert {f"codegym.{k}" for k in known} <= names, names


def _source(package: ModuleType) -> ast.Module:
    assert package.__file__ is not None
    return ast.parse(Path(package.__file__).read_text())


def _typing_imports(package: ModuleType) -> dict[str, str]:
    """``{name: module}`` of the package's ``if TYPE_CHECKING:`` block, read with ``ast``."""
    tree = _source(package)
    blocks = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, f"{package.__name__}: one `if TYPE_CHECKING:` block"
    assert not blocks[0].orelse, package.__name__
    found: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom) and not node.level, ast.unparse(node)
        for alias in node.names:
            # ``as name``: an explicit re-export, since ``__all__`` is not a literal mypy reads
            assert alias.asname == alias.name, f"{package.__name__}: {ast.unparse(node)}"
            assert alias.name not in found, f"{package.__name__}: {alias.name} twice"
            found[alias.name] = str(node.module)
    return found


def _strings_outside_the_table(package: ModuleType) -> set[str]:
    """Every string literal in the package's source but those of its ``_LAZY`` table."""
    out: set[str] = set()
    for node in _source(package).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_LAZY":
            continue
        out |= {
            n.value
            for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
    return out


@pytest.mark.parametrize("package", LAZY, ids=lambda m: m.__name__)
def test_lazy_names_come_from_one_table(package: ModuleType) -> None:
    table = vars(package).get("_LAZY")
    assert isinstance(table, dict) and table, f"{package.__name__}: no _LAZY table"
    assert _typing_imports(package) == table  # the names type checkers see, module for module
    again = set(table) & _strings_outside_the_table(package)  # e.g. a literal ``__all__``
    assert not again, f"{package.__name__}: {sorted(again)} written outside _LAZY"
    assert set(table) <= set(package.__all__), sorted(set(table) - set(package.__all__))
    assert "__dir__" in vars(package), package.__name__
    assert set(table) <= set(dir(package)), sorted(set(table) - set(dir(package)))
    for name, where in table.items():
        module = importlib.import_module(where)
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__ == where, f"{package.__name__}.{name} lives in {obj.__module__}"
        if (package.__name__, name) in SHADOWED:
            continue
        assert getattr(package, name) is obj, f"{package.__name__}.{name}"
        assert f"{package.__name__}.{name}" not in NAMES, f"{name} is also a submodule's name"
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name


def test_shadowed_names_still_shadow() -> None:
    for package, name in SHADOWED:  # an entry comes off when its clash goes
        assert f"{package}.{name}" in NAMES, (package, name)


@pytest.mark.parametrize("package", LAZY, ids=lambda m: m.__name__)
def test_lazy_names_load_on_first_use(package: ModuleType) -> None:
    """In a fresh interpreter, importing a lazy package binds none of its lazy names."""
    probe = f"import {package.__name__} as m; print(sorted(n for n in m._LAZY if n in vars(m)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_one_name_means_one_thing() -> None:
    meaning: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module in MODULES:
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if obj is not None:
                meaning[name][id(obj)].append(module.__name__)
    clashes = {n: sorted(w for ws in m.values() for w in ws) for n, m in meaning.items()
               if len(m) > 1}  # fmt: skip
    assert not clashes, clashes
