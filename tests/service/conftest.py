"""Fixtures for the service tests (helpers live in ``service_support``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from service_support import Serve, Service, make_serve


@pytest.fixture
def serve() -> Serve:
    """``async with serve(workers=1, queue=0) as svc``: a service with that config."""
    return make_serve()


@pytest_asyncio.fixture
async def svc(serve: Serve) -> AsyncIterator[Service]:
    async with serve() as s:
        yield s
