"""Prometheus metrics for every stage of codegym, on prometheus-client's default registry.

The names and label sets below are a public contract: dashboards (``deploy/grafana``) and
alerts are written against them, so extend them but do not rename or relabel. Everything is
registered on ``prometheus_client.REGISTRY``, which the sandbox service exposes at
``/metrics`` and ``serve_metrics`` exposes for long-running CLI commands (``--metrics-port``).

======================================  =========  =================  ==============================
name                                    type       labels             meaning
======================================  =========  =================  ==============================
codegym_sandbox_run_seconds             histogram  tier, op, verdict  worker taken to result (op:
                                                                      python, exec, tests)
codegym_sandbox_queue_wait_seconds      histogram  tier               wait for an idle worker
codegym_sandbox_waiting                 gauge      tier               calls waiting for a worker
codegym_sandbox_workers_busy            gauge      tier               workers running a program
codegym_sandbox_workers_idle            gauge      tier               workers ready for work
codegym_sandbox_zygote_recycles_total   counter    tier, cause        scheduled | replaced
codegym_sandbox_infra_errors_total      counter    tier, reason       reason: INFRA_REASONS
codegym_rollout_episodes_total          counter    env, outcome       finished episodes
codegym_rollout_episodes_in_flight      gauge      env                episodes running now
codegym_rollout_staleness_steps         histogram  env                policy lag, trainer steps
codegym_rollout_infra_errors_total      counter    env, kind          kind: an infra outcome
codegym_rollout_stage_seconds           histogram  env, stage         stage: STAGES
codegym_eval_samples_total              counter    suite, outcome     finished samples
codegym_eval_samples_planned            gauge      suite              samples the eval will do
codegym_eval_samples_in_flight          gauge      suite              samples running now
codegym_eval_pass_rate                  gauge      suite              over scored (non-infra) ones
codegym_trainer_step_seconds            histogram  -                  one optimiser step
codegym_trainer_step                    gauge      -                  last finished step
codegym_trainer_reward_mean             gauge      -                  mean reward, last step
codegym_trainer_kl                      gauge      -                  KL to the reference, last step
codegym_trainer_loss                    gauge      -                  loss, last step
======================================  =========  =================  ==============================

Label values must stay few (they are series): environment, suite and tier names, outcomes
from ``codegym.tasks.outcomes``, and the fixed sets here. Free text (an infra error's message)
goes through ``classify_infra_reason`` first; a stage outside ``STAGES`` is a ``ValueError``.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codegym.errors import CodegymError

STAGES: Final = ("queue", "model", "tool", "sandbox", "reward")
"""Stages of an episode, in the order they happen; the ``stage`` label takes only these."""

INFRA_REASONS: Final = (
    "no_answer",  # a worker hung past its deadline
    "worker_died",  # a worker's process was gone or exited mid-run
    "protocol",  # a worker sent something we could not parse
    "zygote",  # the fork server reported an error
    "restart_failed",  # a replacement worker would not start
    "session_lost",  # a session's only worker died, taking its files
    "harness",  # the in-jail harness could not set the run up
    "init_died",  # the run's init process died without a report
    "other",
)

# Seconds: from a forked print(1) (~3 ms) to batches that run for a minute.
_RUN_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_WAIT_BUCKETS: Final = (0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0)
_STAGE_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
_STALENESS_BUCKETS: Final = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)
_STEP_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# -- sandbox -----------------------------------------------------------------

SANDBOX_RUN_SECONDS: Final = Histogram(
    "codegym_sandbox_run_seconds",
    "One sandbox execution, from taking a worker to the result.",
    ["tier", "op", "verdict"],
    buckets=_RUN_BUCKETS,
)
SANDBOX_QUEUE_WAIT_SECONDS: Final = Histogram(
    "codegym_sandbox_queue_wait_seconds",
    "Time a call waited for an idle sandbox worker.",
    ["tier"],
    buckets=_WAIT_BUCKETS,
)
SANDBOX_WAITING: Final = Gauge(
    "codegym_sandbox_waiting", "Calls waiting for an idle sandbox worker.", ["tier"]
)
SANDBOX_RECYCLES: Final = Counter(
    "codegym_sandbox_zygote_recycles_total",
    "Sandbox zygote restarts (scheduled after recycle_after runs, or replacing a dead one).",
    ["tier", "cause"],
)
SANDBOX_INFRA_ERRORS: Final = Counter(
    "codegym_sandbox_infra_errors_total",
    "Executions the sandbox itself failed (verdict infra), by reason.",
    ["tier", "reason"],
)

# -- rollout -----------------------------------------------------------------

ROLLOUT_EPISODES: Final = Counter(
    "codegym_rollout_episodes_total", "Finished rollout episodes.", ["env", "outcome"]
)
ROLLOUT_IN_FLIGHT: Final = Gauge(
    "codegym_rollout_episodes_in_flight", "Rollout episodes running now.", ["env"]
)
ROLLOUT_STALENESS: Final = Histogram(
    "codegym_rollout_staleness_steps",
    "Trainer steps between the policy version that sampled an episode and the current one.",
    ["env"],
    buckets=_STALENESS_BUCKETS,
)
ROLLOUT_INFRA_ERRORS: Final = Counter(
    "codegym_rollout_infra_errors_total",
    "Infra failures inside rollout episodes (policy server, sandbox, harness).",
    ["env", "kind"],
)
ROLLOUT_STAGE_SECONDS: Final = Histogram(
    "codegym_rollout_stage_seconds",
    "Time spent per episode stage: queue, model, tool, sandbox, reward.",
    ["env", "stage"],
    buckets=_STAGE_BUCKETS,
)

# -- eval --------------------------------------------------------------------

EVAL_SAMPLES: Final = Counter(
    "codegym_eval_samples_total", "Eval samples finished, by outcome.", ["suite", "outcome"]
)
EVAL_PLANNED: Final = Gauge(
    "codegym_eval_samples_planned", "Samples the running eval will score in all.", ["suite"]
)
EVAL_IN_FLIGHT: Final = Gauge(
    "codegym_eval_samples_in_flight", "Eval samples being sampled or scored now.", ["suite"]
)
EVAL_PASS_RATE: Final = Gauge(
    "codegym_eval_pass_rate", "Running pass rate over scored (non-infra) samples.", ["suite"]
)

# -- trainer -----------------------------------------------------------------

# Registered at the first trainer step, not at import: an unlabelled gauge reads 0 from the
# start, so every process that imports this module (the sandbox service, an eval) would
# otherwise export a trainer that does not exist and flatten the trainer panels to zero.
TRAINER_STEP_SECONDS: Final = Histogram(
    "codegym_trainer_step_seconds",
    "Wall time of one trainer step.",
    buckets=_STEP_BUCKETS,
    registry=None,
)
TRAINER_STEP: Final = Gauge(
    "codegym_trainer_step", "The last finished trainer step.", registry=None
)
TRAINER_REWARD_MEAN: Final = Gauge(
    "codegym_trainer_reward_mean", "Mean reward of the last trainer step.", registry=None
)
TRAINER_KL: Final = Gauge(
    "codegym_trainer_kl", "KL to the reference policy, last step.", registry=None
)
TRAINER_LOSS: Final = Gauge("codegym_trainer_loss", "Loss of the last trainer step.", registry=None)
_TRAINER: Final = (
    TRAINER_STEP_SECONDS,
    TRAINER_STEP,
    TRAINER_REWARD_MEAN,
    TRAINER_KL,
    TRAINER_LOSS,
)
_trainer_registered = threading.Lock()
_trainer_on: list[bool] = []


# -- sandbox pool gauges, read at scrape time -----------------------------------


class PoolLike(Protocol):
    """What the pool collector reads from a live sandbox pool."""

    tier_name: str

    def pool_usage(self) -> tuple[int, int]:
        """``(busy, idle)`` worker counts now; ``(0, 0)`` once closed."""
        ...


class _PoolCollector(Collector):
    """Sums busy and idle workers over the live pools, so a pool that is dropped without
    ``close()`` cannot leave a gauge stuck (counting up and down by hand could)."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[PoolLike] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, pool: PoolLike) -> None:
        with self._lock:
            self._pools.add(pool)

    def collect(self) -> Iterable[Metric]:
        busy: dict[str, int] = defaultdict(int)
        idle: dict[str, int] = defaultdict(int)
        with self._lock:
            pools = list(self._pools)
        for pool in pools:
            b, i = pool.pool_usage()
            busy[pool.tier_name] += b
            idle[pool.tier_name] += i
        busy_family = GaugeMetricFamily(
            "codegym_sandbox_workers_busy", "Sandbox workers running a program.", labels=["tier"]
        )
        idle_family = GaugeMetricFamily(
            "codegym_sandbox_workers_idle", "Sandbox workers ready for work.", labels=["tier"]
        )
        for tier in sorted(busy):
            busy_family.add_metric([tier], busy[tier])
            idle_family.add_metric([tier], idle[tier])
        return [busy_family, idle_family]

    def describe(self) -> Iterable[Metric]:
        # Describing without reading pools lets the registry check names at registration.
        return [
            GaugeMetricFamily("codegym_sandbox_workers_busy", "", labels=["tier"]),
            GaugeMetricFamily("codegym_sandbox_workers_idle", "", labels=["tier"]),
        ]


_POOLS: Final = _PoolCollector()
REGISTRY.register(_POOLS)

METRIC_LABELS: Final[dict[str, tuple[str, ...]]] = {
    m._name: tuple(m._labelnames)
    for m in (
        SANDBOX_RUN_SECONDS,
        SANDBOX_QUEUE_WAIT_SECONDS,
        SANDBOX_WAITING,
        SANDBOX_RECYCLES,
        SANDBOX_INFRA_ERRORS,
        ROLLOUT_EPISODES,
        ROLLOUT_IN_FLIGHT,
        ROLLOUT_STALENESS,
        ROLLOUT_INFRA_ERRORS,
        ROLLOUT_STAGE_SECONDS,
        EVAL_SAMPLES,
        EVAL_PLANNED,
        EVAL_IN_FLIGHT,
        EVAL_PASS_RATE,
        TRAINER_STEP_SECONDS,
        TRAINER_STEP,
        TRAINER_REWARD_MEAN,
        TRAINER_KL,
        TRAINER_LOSS,
    )
} | {"codegym_sandbox_workers_busy": ("tier",), "codegym_sandbox_workers_idle": ("tier",)}
"""Every codegym metric family (counters without ``_total``) and its label names."""


def exposed_names() -> dict[str, tuple[str, ...]]:
    """Every sample name PromQL can use (``_bucket``, ``_count``, ``_sum``, ``_total``, ...),
    mapped to its label names (the trainer's too, registered or not yet)."""
    out: dict[str, tuple[str, ...]] = {}
    families = [*REGISTRY.collect(), *(f for m in _TRAINER for f in m.describe())]
    for metric in families:
        if metric.name not in METRIC_LABELS:
            continue
        labels = METRIC_LABELS[metric.name]
        suffixes = {
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "counter": ("_total", "_created"),
        }.get(metric.type, ("",))
        for suffix in suffixes:
            out[metric.name + suffix] = labels
    return out


def track_pool(pool: PoolLike) -> None:
    """Count a sandbox pool's workers in the busy/idle gauges for as long as it lives."""
    _POOLS.add(pool)


# The sandbox records on every execution: resolve each (bounded) label set once, since
# ``labels()`` validates and locks on every call.
_run_child = functools.cache(SANDBOX_RUN_SECONDS.labels)
_waiting_child = functools.cache(SANDBOX_WAITING.labels)
_wait_child = functools.cache(SANDBOX_QUEUE_WAIT_SECONDS.labels)


def observe_sandbox_run(tier: str, op: str, verdict: str, seconds: float) -> None:
    """One finished execution (``op``: python, exec or tests)."""
    _run_child(tier, op, verdict).observe(seconds)


class _Waiting:
    """Counts a waiter while inside; observes the wait on exit (a class: cheaper than a
    generator context manager on this per-execution path)."""

    __slots__ = ("_gauge", "_hist", "_start")

    def __init__(self, tier: str) -> None:
        self._gauge = _waiting_child(tier)
        self._hist = _wait_child(tier)
        self._start = 0.0

    def __enter__(self) -> None:
        self._gauge.inc()
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._gauge.dec()
        self._hist.observe(time.perf_counter() - self._start)


def sandbox_waiting(tier: str) -> _Waiting:
    """Wrap the wait for a worker: counts the waiters and observes the wait on exit."""
    return _Waiting(tier)


def count_recycle(tier: str, cause: str) -> None:
    """A zygote restart; ``cause`` is ``scheduled`` or ``replaced``."""
    SANDBOX_RECYCLES.labels(tier, cause).inc()


def classify_infra_reason(reason: str) -> str:
    """Map an infra error's free-text reason to one of ``INFRA_REASONS``."""
    text = reason.lower()
    for needle, kind in (
        ("did not answer", "no_answer"),
        ("session's worker died", "session_lost"),
        ("could not restart", "restart_failed"),
        ("protocol error", "protocol"),
        ("zygote error", "zygote"),
        ("harness set-up", "harness"),
        ("init process died", "init_died"),
        ("not running", "worker_died"),
        ("worker did not start", "restart_failed"),
        ("exited", "worker_died"),
        ("died", "worker_died"),
        ("closed", "worker_died"),
        ("broken pipe", "worker_died"),
        ("connection reset", "worker_died"),
    ):
        if needle in text:
            return kind
    return "other"


def count_sandbox_infra(tier: str, reason: str) -> str:
    """Count one infra failure; returns the bounded ``reason`` label it was counted under."""
    kind = classify_infra_reason(reason)
    SANDBOX_INFRA_ERRORS.labels(tier, kind).inc()
    return kind


def _check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r} is not a known stage; use one of {', '.join(STAGES)}")
    return stage


def observe_stage(stage: str, seconds: float, *, env: str = "") -> None:
    """Time spent in one stage of an episode.

    Raises:
        ValueError: ``stage`` is not one of ``STAGES``.
    """
    ROLLOUT_STAGE_SECONDS.labels(env, _check_stage(stage)).observe(seconds)


@contextmanager
def time_stage(stage: str, *, env: str = "") -> Iterator[None]:
    """Time a block as one stage; observed even when the block raises (a failed model call
    still spent that time)."""
    label = ROLLOUT_STAGE_SECONDS.labels(env, _check_stage(stage))
    start = time.perf_counter()
    try:
        yield
    finally:
        label.observe(time.perf_counter() - start)


@contextmanager
def episode_in_flight(env: str) -> Iterator[None]:
    """Count an episode as in flight for the duration of the block."""
    with ROLLOUT_IN_FLIGHT.labels(env).track_inprogress():
        yield


def record_episode(env: str, outcome: str, *, staleness: int | None = None) -> None:
    """A finished episode, and how stale its policy was (in trainer steps) when known."""
    ROLLOUT_EPISODES.labels(env, outcome).inc()
    if staleness is not None:
        ROLLOUT_STALENESS.labels(env).observe(staleness)


def rollout_infra_error(env: str, kind: str) -> None:
    """An infra failure in an episode; ``kind`` is an infra outcome (``policy_error``, ...)."""
    ROLLOUT_INFRA_ERRORS.labels(env, kind).inc()


@dataclass
class EvalProgress:
    """Counts one eval's samples and keeps its pass-rate gauge current.

    Infra outcomes are counted but left out of the pass rate, as they are left out of
    every statistic.
    """

    suite: str
    planned: int = 0
    passed: int = 0
    scored: int = 0

    def __post_init__(self) -> None:
        EVAL_PLANNED.labels(self.suite).set(self.planned)

    def plan(self, n: int) -> None:
        """``n`` more samples will be scored (the progress panel's denominator)."""
        self.planned += n
        EVAL_PLANNED.labels(self.suite).set(self.planned)

    @contextmanager
    def in_flight(self, n: int = 1) -> Iterator[None]:
        """Count ``n`` samples as being sampled or scored for the duration of the block."""
        gauge = EVAL_IN_FLIGHT.labels(self.suite)
        gauge.inc(n)
        try:
            yield
        finally:
            gauge.dec(n)

    def record(self, outcome: str, *, passed: bool, infra: bool = False) -> None:
        EVAL_SAMPLES.labels(self.suite, outcome).inc()
        if infra:
            return
        self.scored += 1
        self.passed += int(passed)
        EVAL_PASS_RATE.labels(self.suite).set(self.passed / self.scored)


def record_trainer_step(
    step: int, seconds: float, *, reward_mean: float, kl: float, loss: float
) -> None:
    """One finished optimiser step."""
    if not _trainer_on:
        with _trainer_registered:
            if not _trainer_on:
                for m in _TRAINER:
                    REGISTRY.register(m)
                _trainer_on.append(True)
    TRAINER_STEP_SECONDS.observe(seconds)
    TRAINER_STEP.set(step)
    TRAINER_REWARD_MEAN.set(reward_mean)
    TRAINER_KL.set(kl)
    TRAINER_LOSS.set(loss)


class MetricsServerError(CodegymError, OSError):
    """The metrics endpoint could not be opened (port taken, bad address)."""


class MetricsPortError(MetricsServerError, ValueError):
    """The metrics port asked for is not a port (an int in 0..65535)."""


@dataclass(frozen=True)
class MetricsServer:
    """A running ``/metrics`` endpoint on a daemon thread."""

    host: str
    port: int
    """The bound port (the real one when 0 was asked for)."""
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve the default registry in the Prometheus text format at ``http://host:port/``.

    Binds loopback unless told otherwise: metrics name tasks and hosts. ``port=0`` picks a
    free port (read it from the result).

    Raises:
        MetricsServerError: the port is in use or the address cannot be bound.
        MetricsPortError: ``port`` is outside 0..65535 (a MetricsServerError and a ValueError).
    """
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise MetricsPortError(f"metrics port {port!r} must be an integer in 0..65535")
    try:
        server, thread = start_http_server(port, addr=host)
    except OSError as e:
        raise MetricsServerError(
            e.errno,
            f"cannot serve metrics on {host}:{port}: {e.strerror or e}; "
            "choose another --metrics-port (0 picks a free one)",
        ) from e
    return MetricsServer(host, server.server_port, server, thread)
