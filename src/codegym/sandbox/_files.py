"""Workspace file operations, for anything with a ``run`` (a session, a kept workspace)."""

from __future__ import annotations

import base64
from typing import Any

from codegym.sandbox.errors import FileTooLarge, SandboxInfraError, WorkspaceError
from codegym.sandbox.limits import Limits, check_path
from codegym.sandbox.result import Verdict


async def write_file(run: Any, path: str, content: str | bytes) -> None:
    """Write one file through a run (see ``Session.write_file``)."""
    r = await run(["true"], files={path: content})
    if r.verdict is Verdict.INFRA:
        raise SandboxInfraError(f"could not write {path!r}: {r.reason}")
    if r.verdict is not Verdict.OK:
        raise WorkspaceError(r.reason or f"could not write {path!r}: {r.stderr.strip()}")


async def read_file(run: Any, path: str, max_bytes: int) -> bytes:
    """Read one file through a run (see ``Session.read_file``)."""
    check_path(path)
    limit = Limits(output_bytes=max_bytes * 4 // 3 + 4096)
    r = await run(["base64", "-w0", "--", path], limits=limit)
    if r.verdict is Verdict.INFRA:
        raise SandboxInfraError(f"could not read {path!r}: {r.reason}")
    if r.verdict is Verdict.OUTPUT_LIMIT:
        raise FileTooLarge(f"{path!r} is larger than {max_bytes} bytes")
    if r.verdict is not Verdict.OK:
        if "No such file" in r.stderr:
            raise FileNotFoundError(path)
        raise WorkspaceError(f"could not read {path!r}: {r.reason} {r.stderr.strip()}")
    return base64.b64decode(r.stdout)
