"""Errors raised by the result store.

Every message names the file or input at fault and says how to fix it::

    StoreError
     ├── StoreInputError   a record, key part or run id the store cannot take (also a
     │                     ValueError and a TypeError, so either ``except`` catches it)
     ├── StoreLocked       another process holds the store file read-write
     ├── StoreCorrupt      the file is not a DuckDB database, or has a newer schema
     └── StoreClosed       the store was used after ``close()``
"""

from __future__ import annotations

from pathlib import Path

from codegym.errors import CodegymError


class StoreError(CodegymError):
    """Base of every error the store raises."""


class StoreInputError(StoreError, ValueError, TypeError):
    """The caller passed something the store cannot keep; the message says how to fix it."""


class StoreLocked(StoreError):
    """Another process has the store file open for writing (DuckDB allows one)."""

    def __init__(self, path: Path, cause: str) -> None:
        self.path = path
        super().__init__(
            f"the result store {str(path)!r} is in use by another process ({cause}).\n"
            "DuckDB lets one process write a store file at a time. Wait for that process "
            "to finish, or give this one its own file with --store PATH (or the "
            "CODEGYM_STORE environment variable); read-only access (read_only=True) may "
            "share a file only with other readers."
        )


class StoreCorrupt(StoreError):
    """The file at the store path cannot be opened as a codegym store."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        super().__init__(
            f"cannot open {str(path)!r} as a codegym result store: {why}.\n"
            "Point --store (or CODEGYM_STORE) at another file, or move this one aside; "
            "codegym creates a new store when the file does not exist."
        )


class StoreClosed(StoreError):
    """The store was used after ``close()``."""
