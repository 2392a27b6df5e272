"""The telemetry error that both ``tracing`` and its JSON-lines exporter (``_jsonl``) raise,
kept below both so neither imports the other for it."""

from __future__ import annotations

from codegym.errors import CodegymError


class TracingConfigError(CodegymError, ValueError):
    """``configure_tracing`` was given an unknown exporter or an unusable path."""
