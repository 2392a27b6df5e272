"""Named plug-ins of one kind, imported on first use.

A sandbox tier, a dataset format, an eval metric and a policy are each one file and one
registration: ``REGISTRY.register("name", "package.module:attr")`` (or the object itself).
A string target is imported only when the name is first asked for, so a command does not
pay for plug-ins it does not use, and an unknown name is an error that lists the
registered ones and says how to add one (as inspect_ai does for its model providers).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from codegym.errors import CodegymError

T = TypeVar("T")


class UnknownName(CodegymError, ValueError):
    """A name no plug-in is registered under; the message lists the registered ones."""


class Registry(Generic[T]):
    """Plug-ins of one ``kind`` by name (see the module docstring)."""

    def __init__(self, kind: str, how: str) -> None:
        """``kind`` names them in errors ("sandbox tier"); ``how`` says how to add one."""
        self.kind = kind
        self.how = how
        self._targets: dict[str, T | str] = {}
        self._loaded: dict[str, T] = {}

    def register(self, name: str, target: T | str) -> None:
        """Register ``target`` (an object, or ``"module:attr"`` to import on first use).

        Raises:
            ValueError: ``name`` is taken by another target.
        """
        if not name or not isinstance(name, str):
            raise ValueError(f"a {self.kind} needs a non-empty name, not {name!r}")
        old = self._targets.get(name)
        if old is not None and old != target and self._loaded.get(name) is not target:
            raise ValueError(f"{self.kind} {name!r} is registered already ({old!r})")
        self._targets[name] = target

    def plugin(self, name: str) -> Callable[[T], T]:
        """Decorator form of ``register`` (registers the decorated object, returns it)."""

        def deco(obj: T) -> T:
            self.register(name, obj)
            return obj

        return deco

    def get(self, name: str) -> T:
        """The plug-in ``name``, imported now if it was registered by path.

        Raises:
            UnknownName: nothing is registered under ``name`` (lists what is).
        """
        if name in self._loaded:
            return self._loaded[name]
        target = self._targets.get(name)
        if target is None:
            raise UnknownName(
                f"unknown {self.kind} {name!r}; registered: {', '.join(self.names()) or 'none'}"
                f" ({self.how})"
            )
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            loaded: T = getattr(importlib.import_module(module), attr)
        else:
            loaded = target
        self._loaded[name] = loaded
        return loaded

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets
