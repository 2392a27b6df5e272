"""Package attributes that import their module on first use (PEP 562).

A package writes its lazy names once, as ``_LAZY = {name: module}``, and derives the rest::

    __getattr__, __dir__, __all__ = lazy_package(__name__, _LAZY)

``import codegym.evals`` then costs nothing until a name is used, so a CLI command does
not pay for scipy, FastAPI or aiohttp it never touches. Type checkers cannot follow
``__getattr__``, so the package also imports each name under ``if TYPE_CHECKING:`` as
``from module import name as name`` (the ``as`` marks an explicit re-export);
``tests/test_exported_members.py`` holds that block to the table, name for name.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_package(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: ``__getattr__`` loads ``name``
    from ``table[name]`` and caches it, ``__dir__`` lists the lazy names with the loaded
    ones, and ``__all__`` is the table's names, sorted. A package that also imports names
    itself lists those in ``__all__`` and adds these (``__all__ += names``)."""
    names = sorted(table)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup skips this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__, names
