"""Errors raised by the sandbox layer.

Infra failures during an execution are *data* (``Verdict.INFRA`` with a reason), never
exceptions: a caller scoring thousands of programs must not crash on one. Exceptions are
reserved for the caller's own mistakes and for a host that cannot run a tier at all::

    SandboxError
     ├── SandboxInputError     bad code, files or limits: names the input and the fix
     ├── HostUnsupported       the host lacks what a tier needs: says what and which tier works
     └── SandboxClosed         the pool was used after close()
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base of every error the sandbox raises."""


class SandboxInputError(SandboxError, ValueError):
    """The caller passed something the sandbox cannot run; the message says how to fix it."""


class HostUnsupported(SandboxError):
    """This host cannot provide what the requested tier needs."""

    def __init__(self, tier: str, missing: list[str], works: list[str]) -> None:
        self.tier = tier
        self.missing = missing
        self.works = works
        alt = ", ".join(works) if works else "none"
        lines = "\n".join(f"  - {m}" for m in missing)
        super().__init__(
            f"the {tier!r} sandbox tier cannot run on this host:\n{lines}\n"
            f"tiers that work here: {alt}"
        )


class SandboxClosed(SandboxError):
    """The sandbox pool was used after it was closed."""
