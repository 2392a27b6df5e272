"""``codegym sandbox serve``: the sandbox as an HTTP service (see ``codegym.service``)."""

from codegym.service._cli import serve

__all__ = ["serve"]
