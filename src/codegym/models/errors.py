"""The models layer's error type."""

from __future__ import annotations

from codegym.errors import CodegymError


class ModelConfigError(CodegymError, ValueError):
    """A bad sampling or pretraining parameter; the message names it and the fix."""
