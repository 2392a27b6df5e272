"""The ``codegym`` command line."""

from codegym.cli.app import app, main

__all__ = ["app", "main"]
