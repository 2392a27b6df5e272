"""The sandbox contract, written once: what a local ``Sandbox`` and the service's
``RemoteSandbox`` both offer, so that code scoring through either (the eval runner, the
ground-truth check, task scoring) is typed against one thing and mypy checks both
implementations against it (``service.client`` asserts ``RemoteSandbox`` conforms;
``Sandbox`` below).

Only what both do: runs (a Python program, a command, a batch of tests), the pool's size
for sizing concurrency, and closing. Workspaces and sessions differ in their types on the
two sides (an ``Image`` and a ``Workspace`` here, references over HTTP there) and are not
part of it; a run's ``workspace`` here is an image reference, which both take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from codegym.sandbox.cases import TestCase, Text
from codegym.sandbox.limits import Limits
from codegym.sandbox.result import ExecResult

__all__ = ["SandboxAPI"]


class SandboxAPI(Protocol):
    """Runs model-written code; see ``Sandbox`` for each method's contract."""

    @property
    def size(self) -> int:
        """Workers (executions at once), for sizing how many runs to keep in flight."""
        ...

    async def run_python(
        self,
        code: Text,
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        workspace: str | None = None,
    ) -> ExecResult: ...

    async def run(
        self,
        command: str | Sequence[str],
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: str | None = None,
    ) -> ExecResult: ...

    async def run_tests(
        self,
        code: Text | None,
        tests: Sequence[TestCase],
        *,
        command: str | Sequence[str] | None = None,
        build: str | Sequence[str] | None = None,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult: ...

    async def close(self) -> None: ...


if TYPE_CHECKING:
    from codegym.sandbox.sandbox import Sandbox

    def _conforms(sandbox: Sandbox) -> SandboxAPI:
        return sandbox  # mypy: Sandbox is a SandboxAPI
