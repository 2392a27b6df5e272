"""Shared fixtures: a real sandbox pool per test (startup is ~0.1 s)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from codegym.sandbox import Sandbox


@pytest_asyncio.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(tier="jail", workers=2) as sb:
        yield sb
