"""Fixtures for trainer tests: the toy tiny model, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import SMALL

from codegym.models import ensure_tiny_model


@pytest.fixture(scope="session")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("models"), SMALL)
