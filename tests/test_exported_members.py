"""Every package's public surface, both ways (httpx's ``test_exported_members`` habit):
what ``__all__`` names exists, what a package defines or re-exports is in ``__all__``,
names loaded on first use are in ``__all__`` and nowhere else, and one name means one
thing across all of codegym."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict
from types import ModuleType

import pytest

import codegym
from codegym._lazy import lazy_exports

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
        and obj is not lazy_exports  # the machinery that loads the names
    }
    missing = public - exported
    assert not missing, f"{package.__name__} exposes {sorted(missing)} without __all__"
    lazy = getattr(package, "__getattr__", None)
    if lazy is not None:  # names loaded on first use: every one is exported
        table = inspect.getclosurevars(lazy).nonlocals.get("table", {})
        assert set(table) <= exported, sorted(set(table) - exported)


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
