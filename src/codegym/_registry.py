"""Named plug-ins of one kind, imported on first use.

A sandbox tier, a dataset format, an eval metric and a policy are each one file and one
registration: ``REGISTRY.register("name", "package.module:attr")`` (or the object itself).
A string target is imported only when the name is first asked for, so a command does not
pay for plug-ins it does not use, and an unknown name is an error that lists the
registered ones and says how to add one (as inspect_ai does for its model providers).

Plug-ins from outside codegym are modules that register what they define when imported,
found the way pytest finds its plug-ins (``load_plugins``): an installed package's entry
point in the ``codegym.plugins`` group, the ``CODEGYM_PLUGINS`` environment variable
(``mod1,mod2``) and ``codegym --plugin MODULE``. ``codegym`` loads them before it runs a
command; a registry loads the first two itself the first time it is asked for a name it
does not have or for its names, so ``Sandbox(tier="mine")`` finds an installed plug-in
too. A plug-in that fails to import is a ``PluginError`` that names it and the fix.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Generic, TypeVar

from codegym.errors import CodegymError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")


class UnknownName(CodegymError, ValueError):
    """A name no plug-in is registered under; the message lists the registered ones."""


class RegistrationError(CodegymError, ValueError):
    """A registration refused: an empty or malformed name, or one taken by another target."""


ENTRY_POINT_GROUP = "codegym.plugins"
"""The entry-point group an installed package names its plug-in modules in."""
PLUGINS_ENV = "CODEGYM_PLUGINS"
"""Comma-separated plug-in modules to import (``mod1,mod2``)."""
NO_AUTOLOAD_ENV = "CODEGYM_DISABLE_PLUGIN_AUTOLOAD"
"""Set (to anything but empty) to skip the entry points (pytest's switch of that name)."""


class PluginError(CodegymError):
    """A plug-in module that could not be loaded; the message names it and the fix."""


_loaded_plugins: dict[str, str] = {}  # module -> where it was named
_autoloaded = False


def load_plugins(modules: Iterable[str] = ()) -> list[str]:
    """Import the plug-ins not imported yet: the ``codegym.plugins`` entry points (unless
    ``$CODEGYM_DISABLE_PLUGIN_AUTOLOAD``) and ``$CODEGYM_PLUGINS`` the first time, then
    ``modules`` (``--plugin``). An entry point's value is a module, or ``module:function``
    (called with no arguments once the module is imported). Returns the modules named by
    ``$CODEGYM_PLUGINS`` and ``modules``, in load order (for processes that load them too).

    Raises:
        PluginError: one failed to import or to register (names it, where it was named, and
            the fix).
    """
    global _autoloaded
    if not _autoloaded:
        _autoloaded = True  # first: a plug-in that asks a registry must not load them again
        if not os.environ.get(NO_AUTOLOAD_ENV) and _may_declare(ENTRY_POINT_GROUP):
            from importlib import metadata

            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                _load_entry_point(ep)
        for name in os.environ.get(PLUGINS_ENV, "").split(","):
            if name.strip():
                _load_module(name.strip(), PLUGINS_ENV)
    for name in modules:
        _load_module(name.strip(), "--plugin")
    return list(_loaded_plugins)


def _may_declare(group: str) -> bool:
    """Whether a distribution on ``sys.path`` may declare entry points in ``group``.

    Importing ``importlib.metadata`` and scanning every installed distribution costs
    50-150 ms (this project's environment has over 200), on every command, for entry points
    that are almost never there. So first a plain look at each ``*.dist-info`` and
    ``*.egg-info`` folder's ``entry_points.txt`` for the group's name (a few ms); only a
    hit, or anything this look cannot judge (a zip file on the path, a finder of
    distributions other than the path's), goes to ``importlib.metadata``, which decides.
    """
    if any(
        hasattr(finder, "find_distributions") and not _searches_the_path(finder)
        for finder in sys.meta_path
    ):
        return True
    needle = group.encode()
    for entry in sys.path:
        folder = entry or "."
        if os.path.isfile(folder):
            return True  # a zip: its distributions are for importlib.metadata to read
        try:
            names = os.listdir(folder)
        except OSError:
            continue  # not there, or not ours to read: no distribution found there either
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(folder, name, "entry_points.txt"), "rb") as f:
                        if needle in f.read():
                            return True
                except OSError:
                    continue
    return False


def _searches_the_path(finder: object) -> bool:
    """Whether a finder's distributions are the ``sys.path`` folders' (the standard one, and
    the ``importlib_metadata`` backport's, which mlflow and others import)."""
    kind = finder if isinstance(finder, type) else type(finder)
    return finder is importlib.machinery.PathFinder or (kind.__module__, kind.__name__) == (
        "importlib_metadata",
        "MetadataPathFinder",
    )


def _load_module(name: str, source: str) -> None:
    if name in _loaded_plugins:
        return
    drop = f"drop --plugin {name}" if source == "--plugin" else f"take it out of ${source}"
    if not name.replace(".", "").replace("_", "").isalnum() or name.startswith("."):
        hint = name.removesuffix(".py").replace("\\", "/").rsplit("/", 1)[-1]
        raise PluginError(
            f"plug-in {name!r} ({source}): give a module name, e.g. {hint!r} with its folder "
            "on PYTHONPATH, not a path"
        )
    try:
        importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - whatever it raised: named, with the fix
        raise PluginError(_failed(name, source, e, drop)) from None
    _loaded_plugins[name] = source


def _load_entry_point(ep: EntryPoint) -> None:
    dist = getattr(ep.dist, "name", None)
    source = f"entry point {ep.name!r} of {ENTRY_POINT_GROUP}" + (
        f" in package {dist!r}" if dist else ""
    )
    drop = (
        f"fix or uninstall {f'package {dist!r}' if dist else 'the package that declares it'},"
        f" or set {NO_AUTOLOAD_ENV}=1 to load no entry points"
    )
    try:
        target = ep.load()
        if ep.attr and callable(target) and not isinstance(target, type):
            target()  # "module:register": a function that registers
    except Exception as e:  # noqa: BLE001 - whatever it raised: named, with the fix
        raise PluginError(_failed(ep.value, source, e, drop)) from None


def _failed(name: str, source: str, e: Exception, drop: str) -> str:
    module = name.partition(":")[0]
    if (
        isinstance(e, ModuleNotFoundError)
        and e.name
        and (module == e.name or module.startswith(e.name + "."))
    ):
        top = module.split(".")[0]
        here = os.path.exists(f"{top}.py") or os.path.isdir(top)
        where = (
            f"{top!r} is in this folder, which is not on the path: run with PYTHONPATH=."
            if here
            else "install it or put its folder on PYTHONPATH"
        )
        return f"plug-in {name!r} ({source}): no module named {e.name!r}; {where}, or {drop}"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")]
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return (
        f"plug-in {name!r} ({source}) failed to load: {type(e).__name__}: {e}{at}; fix it, "
        f"or {drop}"
    )


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
            RegistrationError: ``name`` is empty or taken by another target.
        """
        if not name or not isinstance(name, str):
            raise RegistrationError(f"a {self.kind} needs a non-empty name, not {name!r}")
        old = self._targets.get(name)
        if old is not None and old != target and self._loaded.get(name) is not target:
            raise RegistrationError(f"{self.kind} {name!r} is registered already ({old!r})")
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
        if target is None and not _autoloaded:
            load_plugins()
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
        """The registered names, in registration order (plug-ins loaded first)."""
        if not _autoloaded:
            load_plugins()
        return list(self._targets)

    def choices(self) -> str:
        """The registered names for a help text: ``"a, b, c, or a plug-in"``."""
        return f"{', '.join(self.names())}, or a plug-in"

    def __contains__(self, name: object) -> bool:
        if name not in self._targets and not _autoloaded:
            load_plugins()
        return name in self._targets
