"""The JSON-lines span exporter behind ``configure_tracing("file")`` (loaded with the SDK,
only when tracing is configured)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from codegym.telemetry._errors import TracingConfigError


def span_to_dict(s: ReadableSpan) -> dict[str, object]:
    """The JSON-lines record of one span: ids in hex, times in Unix nanoseconds."""
    ctx = s.get_span_context()
    parent = s.parent
    return {
        "name": s.name,
        "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
        "span_id": f"{ctx.span_id:016x}" if ctx else None,
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "kind": s.kind.name,
        "start_ns": s.start_time,
        "end_ns": s.end_time,
        "duration_ms": (s.end_time - s.start_time) / 1e6
        if s.end_time is not None and s.start_time is not None
        else None,
        "status": s.status.status_code.name,
        "status_message": s.status.description,
        "attributes": dict(s.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in s.events
        ],
        "service": s.resource.attributes.get("service.name"),
    }


class JsonlSpanExporter(SpanExporter):
    """Appends each finished span as one JSON line to ``path`` (created with its parents)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Line-buffered append: a crash loses at most the batch in memory, and two runs
            # writing the same file interleave whole lines.
            self._file = self.path.open("a", encoding="utf-8", buffering=1)
        except OSError as e:
            raise TracingConfigError(
                f"cannot write traces to {self.path}: {e.strerror or e}; pass another path"
            ) from e
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_to_dict(s), default=str) + "\n" for s in spans)
        with self._lock:
            if self._file.closed:
                return SpanExportResult.FAILURE
            self._file.write(lines)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if not self._file.closed:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()
