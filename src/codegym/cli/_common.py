"""Helpers shared by CLI commands: turning library errors into clear messages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from codegym.store import Store, StoreError

console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@contextmanager
def open_store(path: Path | None, disabled: bool) -> Iterator[Store | None]:
    """The result store for a command (None with ``--no-store``), closed on exit."""
    if disabled:
        yield None
        return
    try:
        store = Store(path)
    except StoreError as e:
        fail(str(e))
    try:
        yield store
    finally:
        store.close()
