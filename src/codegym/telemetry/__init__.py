"""Metrics, traces and run tracking for every codegym stage.

- ``metrics``: Prometheus metrics on the default registry (names and labels are a public
  contract, tabled in that module) and ``serve_metrics`` for ``--metrics-port``.
- ``tracing``: OpenTelemetry spans (``span``) exported to a JSON-lines file, the console or
  OTLP/HTTP (``configure_tracing``).
- ``tracking``: MLflow runs (``Tracker``): params, per-step metrics, report artifacts.

    from codegym.telemetry import configure_tracing, span, observe_stage
    configure_tracing("file", path="run/traces.jsonl")
    with span("episode", env="humaneval"):
        ...

``tracking`` imports mlflow only when a run starts, so importing this package stays cheap.
"""

from codegym.telemetry.metrics import (
    INFRA_REASONS,
    STAGES,
    EvalProgress,
    MetricsServer,
    MetricsServerError,
    episode_in_flight,
    observe_stage,
    record_episode,
    record_trainer_step,
    rollout_infra_error,
    serve_metrics,
    time_stage,
)
from codegym.telemetry.tracing import (
    TracingConfigError,
    configure_tracing,
    flush_tracing,
    shutdown_tracing,
    span,
    tracing_enabled,
)
from codegym.telemetry.tracking import Tracker, TrackingError

__all__ = [
    "INFRA_REASONS",
    "STAGES",
    "EvalProgress",
    "MetricsServer",
    "MetricsServerError",
    "TracingConfigError",
    "Tracker",
    "TrackingError",
    "configure_tracing",
    "episode_in_flight",
    "flush_tracing",
    "observe_stage",
    "record_episode",
    "record_trainer_step",
    "rollout_infra_error",
    "serve_metrics",
    "shutdown_tracing",
    "span",
    "time_stage",
    "tracing_enabled",
]
