"""Run untrusted, model-written code fast and safely.

``Sandbox`` is a pool of warm workers; each worker is a fork server (zygote) inside an
isolation tier: ``jail`` (bubblewrap namespaces + cgroups + seccomp, the default),
``gvisor`` (runsc, a user-space kernel) or ``process`` (rlimits only, for hosts without
namespaces). Each tier's module docstring states its threat model.

    async with Sandbox(tier="jail", workers=2) as sb:
        r = await sb.run_python("print(1)", limits=Limits(cpu_s=2))
        r.verdict, r.stdout
"""

from codegym.sandbox.api import SandboxAPI
from codegym.sandbox.errors import (
    FileTooLarge,
    HostUnsupported,
    SandboxClosed,
    SandboxError,
    SandboxInfraError,
    SandboxInputError,
    WorkspaceError,
)
from codegym.sandbox.limits import Limits
from codegym.sandbox.result import ExecResult, TestResult, Verdict
from codegym.sandbox.sandbox import AssertTest, Compare, IOTest, Sandbox, Session, TestCase

__all__ = [
    "AssertTest",
    "Compare",
    "ExecResult",
    "FileTooLarge",
    "HostUnsupported",
    "IOTest",
    "Limits",
    "Sandbox",
    "SandboxAPI",
    "SandboxClosed",
    "SandboxError",
    "SandboxInfraError",
    "SandboxInputError",
    "Session",
    "TestCase",
    "TestResult",
    "Verdict",
    "WorkspaceError",
]
