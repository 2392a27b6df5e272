"""OpenTelemetry traces: one episode span with the policy call, tool, sandbox and reward
nested under it, written to a JSON-lines file by default, or to the console or an OTLP/HTTP
collector.

Contract:
- ``configure_tracing(...)`` picks the exporter; until it is called (or after
  ``configure_tracing("none")``), ``span()`` costs one global read and records nothing, so
  instrumented hot paths (every sandbox execution) stay cheap.
- ``span(name, **attrs)`` is a context manager; nesting follows OpenTelemetry's context,
  which lives in ``contextvars``: spans opened in an ``asyncio`` task nest under the span
  that was current when the task was created, and concurrent tasks do not mix.
- A file export is one JSON object per line and per finished span (fields in
  ``span_to_dict``); spans are batched on a background thread and flushed by
  ``shutdown_tracing()`` and at interpreter exit.
- ``codegym`` keeps its own tracer provider rather than replacing OpenTelemetry's global
  one, so reconfiguring (a test, a second run in one process) is allowed and libraries that
  set the global provider are not disturbed. Context propagation is shared.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Final, Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from codegym.errors import CodegymError

Exporter = Literal["file", "console", "otlp", "none"]
EXPORTERS: Final = ("file", "console", "otlp", "none")
DEFAULT_TRACE_FILE: Final = "codegym-traces.jsonl"
"""Where ``configure_tracing("file")`` writes when no path is given (current directory)."""

_lock = threading.Lock()
_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None


class TracingConfigError(CodegymError, ValueError):
    """``configure_tracing`` was given an unknown exporter or an unusable path."""


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


def configure_tracing(
    exporter: Exporter | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    service_name: str = "codegym",
) -> None:
    """Choose where spans go; replaces (and flushes) any earlier configuration.

    Args:
        exporter: ``file`` (JSON lines at ``path``, default ``DEFAULT_TRACE_FILE``),
            ``console`` (stdout), ``otlp`` (OTLP/HTTP to ``endpoint``) or ``none``. When
            omitted: ``otlp`` if ``endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, else ``file``.
        endpoint: the collector's traces URL (``http://host:4318/v1/traces``); when omitted
            the OTLP exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables.
        service_name: the ``service.name`` resource attribute.

    Raises:
        TracingConfigError: an unknown exporter or an unwritable file.
    """
    global _provider, _tracer
    if exporter is None:
        env_set = any(
            os.environ.get(v)
            for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        )
        exporter = "otlp" if endpoint or env_set else "file"
    if exporter not in EXPORTERS:
        raise TracingConfigError(
            f"unknown trace exporter {exporter!r}; use one of {', '.join(EXPORTERS)}"
        )
    provider: TracerProvider | None = None
    if exporter != "none":
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        if exporter == "file":
            provider.add_span_processor(
                BatchSpanProcessor(JsonlSpanExporter(path or DEFAULT_TRACE_FILE))
            )
        elif exporter == "console":
            # Console output is for a person watching: print each span as it ends, to the
            # stdout of now (the exporter's default is the stdout at its import).
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    with _lock:
        old, _provider = _provider, provider
        _tracer = provider.get_tracer("codegym") if provider is not None else None
    if old is not None:
        old.shutdown()


def shutdown_tracing() -> None:
    """Flush every pending span and stop exporting (``span()`` records nothing after)."""
    configure_tracing("none")


def tracing_enabled() -> bool:
    """True when spans are being recorded and exported."""
    return _tracer is not None


def flush_tracing(timeout_s: float = 30.0) -> bool:
    """Export every finished span now; False if the exporter did not finish in time."""
    provider = _provider
    return provider.force_flush(int(timeout_s * 1000)) if provider is not None else True


_OFF: Final = nullcontext(trace.INVALID_SPAN)  # reusable; what span() returns when off


def span(name: str, **attrs: AttributeValue | None) -> AbstractContextManager[Span]:
    """Open a span named ``name`` as a child of the current one; the ``with`` target is the
    span, so attributes known only later (a verdict) can be set. ``None`` attributes are
    skipped.

    An exception escaping the block is recorded on the span, which ends with status ERROR,
    and re-raised. With tracing off this returns a shared no-op context whose target is
    OpenTelemetry's ``INVALID_SPAN`` (about a microsecond).
    """
    tracer = _tracer
    if tracer is None:
        return _OFF
    clean: Mapping[str, AttributeValue] = {k: v for k, v in attrs.items() if v is not None}
    return tracer.start_as_current_span(name, attributes=clean)


def set_error(s: Span, message: str) -> None:
    """Mark a span failed without an exception (an infra verdict, a policy error reply)."""
    s.set_status(Status(StatusCode.ERROR, message))
