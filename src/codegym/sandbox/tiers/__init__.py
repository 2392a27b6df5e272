"""Sandbox tier plug-ins: ``jail`` (default), ``gvisor`` and ``process``."""

from __future__ import annotations

from codegym.sandbox.errors import SandboxInputError
from codegym.sandbox.tier import Tier

TIER_NAMES = ("jail", "gvisor", "process")


def make_tier(name: str, python: str | None = None) -> Tier:
    if name == "jail":
        from codegym.sandbox.tiers.jail import JailTier

        return JailTier(python)
    if name == "gvisor":
        from codegym.sandbox.tiers.gvisor import GVisorTier

        tier: Tier = GVisorTier(python)
        return tier
    if name == "process":
        from codegym.sandbox.tiers.process import ProcessTier

        return ProcessTier(python)
    raise SandboxInputError(f"unknown sandbox tier {name!r}; choose one of {', '.join(TIER_NAMES)}")


def working_tiers(python: str | None = None) -> list[str]:
    return [n for n in TIER_NAMES if not make_tier(n, python).problems()]
