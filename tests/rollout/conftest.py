"""Fixtures for rollout tests: a real jail sandbox and seeded synthetic tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import Task
from codegym.tasks.synthetic import generate


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(tier="jail", workers=2) as sb:
        yield sb


@pytest.fixture
def tasks() -> list[Task]:
    return generate("infer", n=4, seed=7, difficulty=1)
