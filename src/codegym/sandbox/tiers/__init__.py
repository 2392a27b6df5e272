"""Sandbox tier plug-ins: ``jail`` (default), ``gvisor`` and ``process``, by name.

A tier is one file with a ``Tier`` subclass (``codegym.sandbox.tier``) and one
registration here or in the code that uses it:
``TIERS.register("mine", "my_package.my_tier:MyTier")`` (imported on first use). Every
command's ``--tier``, ``Sandbox(tier=...)`` and ``codegym sandbox check`` then know it;
docs/extending.md has a whole example.
"""

from __future__ import annotations

from typing import Protocol

from codegym._registry import Registry, UnknownName
from codegym.sandbox.errors import SandboxInputError
from codegym.sandbox.tier import Tier


class TierClass(Protocol):
    def __call__(self, python: str | None = None) -> Tier: ...


TIERS: Registry[TierClass] = Registry(
    "sandbox tier",
    "add one with codegym.sandbox.tiers.TIERS.register(name, 'module:TierSubclass')",
)
TIERS.register("jail", "codegym.sandbox.tiers.jail:JailTier")
TIERS.register("gvisor", "codegym.sandbox.tiers.gvisor:GVisorTier")
TIERS.register("process", "codegym.sandbox.tiers.process:ProcessTier")


def tier_names() -> list[str]:
    """The registered tiers, the built-in ones first."""
    return TIERS.names()


def make_tier(name: str, python: str | None = None) -> Tier:
    """The tier ``name``.

    Raises:
        SandboxInputError: no tier of that name (the message lists the registered ones).
    """
    try:
        cls = TIERS.get(name)
    except UnknownName as e:
        raise SandboxInputError(str(e)) from None
    return cls(python)


def working_tiers(python: str | None = None) -> list[str]:
    return [n for n in tier_names() if not make_tier(n, python).problems()]
