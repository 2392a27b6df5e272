"""The standing adversarial suite: reward-hacking programs against the real sandbox.

Each test is one hostile property, written as an RL policy hunting for reward would write
it. Each asserts the *model* outcome the program earned (never a pass it did not compute,
never ``infra`` for something it caused) and, through ``clean``, that the pool is
unharmed: no infra, no worker restart, and a plain run on every worker still behaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from adversary_kit import Clean

from codegym.sandbox import HostUnsupported, Sandbox
from jail import no_jail
from workspace_kit import WorkspaceSandbox


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["tmpfs", "workspace"])
async def sb(request: pytest.FixtureRequest, tiny_image) -> AsyncIterator[Sandbox]:  # type: ignore[no-untyped-def]
    """The pool; each module's tests run twice: in the plain tmpfs work dir, and in fresh
    copy-on-write workspaces of an image (``workspace_kit``)."""
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
        yield box
    finally:
        await box.close()


@pytest.fixture
def clean(sb: Sandbox) -> Clean:
    """``await clean()`` at the end of a test: the pool took no harm."""
    return Clean(sb)
