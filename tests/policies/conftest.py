"""A real fake OpenAI server on loopback per test (starts in ~0.1 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codegym.testing import FakeOpenAIServer


@pytest.fixture
def srv() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server
