"""A tiny random GPT-2 folder and a real model server on loopback, shared per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codegym.serving import ModelServer, build_random_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 1024 positions: a tool description and a conversation fit the byte-level tokenizer
    return build_random_model(
        tmp_path_factory.mktemp("model") / "tiny-random", n_embd=32, n_positions=1024
    )


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[ModelServer]:
    with ModelServer(model_dir, model_name="tiny") as srv:
        yield srv
