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

import os
import sys
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Final, Literal

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:  # the SDK loads when tracing is configured, not with every import
    from opentelemetry.sdk.trace import TracerProvider

from codegym.telemetry._errors import TracingConfigError as TracingConfigError

Exporter = Literal["file", "console", "otlp", "none"]
EXPORTERS: Final = ("file", "console", "otlp", "none")
DEFAULT_TRACE_FILE: Final = "codegym-traces.jsonl"
"""Where ``configure_tracing("file")`` writes when no path is given (current directory)."""

_lock = threading.Lock()
_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None


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
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        from codegym.telemetry._jsonl import JsonlSpanExporter

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
