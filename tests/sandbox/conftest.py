"""Fixtures of the adversarial tests (``test_hostile*.py``); see ``hostile_kit``.

``sb`` is the module-scoped pool those tests share; other test modules here that want a
pool of their own define their own ``sb`` (a module's fixture overrides this one).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from hostile_kit import SECRET, SECRET_VAR, UID, _baseline, _probe_every_worker

from codegym.sandbox import HostUnsupported, Sandbox
from jail import no_jail
from workspace_kit import WorkspaceSandbox


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["tmpfs", "workspace"])
async def sb(request: pytest.FixtureRequest, tiny_image) -> AsyncIterator[Sandbox]:  # type: ignore[no-untyped-def]
    """The pool; each module's tests run twice: in the plain tmpfs work dir, and in fresh
    copy-on-write workspaces of an image (``workspace_kit``)."""
    # A secret in the host process's environment: no sandboxed program may see it.
    old = os.environ.get(SECRET_VAR)
    os.environ[SECRET_VAR] = SECRET
    try:
        if request.param == "workspace":
            store, image = tiny_image
            box: Sandbox = WorkspaceSandbox(image, store, tier="jail", workers=2)
        else:
            box = Sandbox(tier="jail", workers=2)
        try:
            await box.start()
        except HostUnsupported as e:
            no_jail(e)
        try:
            first, *rest = await _probe_every_worker(box)
            assert all(p == first for p in rest)
            assert len(first["procs"]) <= 2  # itself, and perhaps its run's init process
            _baseline.clear()
            _baseline.update(first)
            yield box
        finally:
            await box.close()
    finally:
        if old is None:
            os.environ.pop(SECRET_VAR, None)
        else:
            os.environ[SECRET_VAR] = old


@pytest.fixture
def host_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A host process running as the sandbox's own uid, outside any sandbox."""
    as_uid = {"user": UID, "group": UID, "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(["sleep", "60"], **as_uid)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
