"""Shared fixtures: a real sandbox pool per test (startup is ~0.1 s), and a real image."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from codegym.sandbox import Sandbox
from codegym.sandbox.images import Image, ImageStore
from codegym.sandbox.images.layers import remove_tree
from workspace_kit import build_tiny_image


@pytest_asyncio.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(tier="jail", workers=2) as sb:
        yield sb


@pytest.fixture(scope="session")
def tiny_image() -> Iterator[tuple[ImageStore, Image]]:
    """An image built once per test session: see ``workspace_kit.build_tiny_image``.

    Under a folder of its own in the system temp dir, open to the sandbox uid (pytest's
    temp folders are not, when the tests run as root)."""
    root = Path(tempfile.mkdtemp(prefix="codegym-test-images-"))
    os.chmod(root, 0o755)
    try:
        yield build_tiny_image(root)
    finally:
        remove_tree(root)
