"""Package attributes that import their module on first use (PEP 562).

A package lists ``name -> module`` and sets ``__getattr__ = lazy_exports(__name__, table)``:
``import codegym.evals`` then costs nothing until a name is used, so a CLI command does
not pay for scipy, FastAPI or aiohttp it never touches.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that loads ``name`` from ``table[name]`` and caches it."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup skips this function
        return value

    return __getattr__
