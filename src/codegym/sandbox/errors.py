"""Errors raised by the sandbox layer.

Infra failures during an execution are *data* (``Verdict.INFRA`` with a reason), never
exceptions: a caller scoring thousands of programs must not crash on one. Exceptions are
reserved for the caller's own mistakes and for a host that cannot run a tier at all::

    SandboxError
     ├── SandboxInputError     bad code, files or limits: names the input and the fix
     ├── WorkspaceError        a session's workspace refused a file operation (a folder that
     │    │                    is a file or a symlink, a full disk): the caller's or the
     │    │                    program's doing, never the sandbox's
     │    └── FileTooLarge     a file to read is larger than asked for
     ├── SandboxInfraError     the sandbox failed a session file operation (a worker died, the
     │                         service is gone): ours, never the caller's
     ├── HostUnsupported       the host lacks what a tier needs: says what and which tier works
     └── SandboxClosed         the pool was used after close()

Callers that must tell whose fault a failure is (an agent's tool, say) catch
``SandboxInfraError`` for ours and every other ``SandboxError`` as the caller's: the kind
decides, never the message's text.
"""

from __future__ import annotations

from codegym.errors import CodegymError


class SandboxError(CodegymError):
    """Base of every error the sandbox raises."""


class SandboxInputError(SandboxError, ValueError):
    """The caller passed something the sandbox cannot run; the message says how to fix it."""


class WorkspaceError(SandboxError):
    """A session's workspace refused a file operation; the message says what and where."""


class FileTooLarge(WorkspaceError):
    """A workspace file is larger than the reader allowed."""


class SandboxInfraError(SandboxError):
    """The sandbox itself failed a session file operation: not the caller's fault."""

    exit_code = 3  # the run failed on the way, not the input


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
