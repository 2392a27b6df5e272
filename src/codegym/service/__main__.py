"""``python -m codegym.service``: the same as ``codegym sandbox serve``."""

import typer

from codegym.service._cli import serve

typer.run(serve)
