"""Prometheus metrics: recorded by a real sandbox, exposed with the documented labels, served
over HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import codegym.telemetry as telemetry_pkg
from codegym.sandbox import AssertTest, Limits, Sandbox, Session, Verdict
from codegym.telemetry import metrics as m
from codegym.testing import await_until


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_public_surface_is_pinned() -> None:
    assert sorted(telemetry_pkg.__all__) == [
        "EvalProgress", "INFRA_REASONS", "MetricsServer", "MetricsServerError", "STAGES",
        "TracingConfigError", "Tracker", "TrackingError", "configure_tracing",
        "episode_in_flight", "flush_tracing", "observe_stage", "record_episode",
        "record_trainer_step", "rollout_infra_error", "serve_metrics", "shutdown_tracing",
        "span", "time_stage", "tracing_enabled",
    ]  # fmt: skip


async def test_sandbox_runs_are_counted_by_tier_op_and_verdict(sandbox: Sandbox) -> None:
    runs = "codegym_sandbox_run_seconds_count"
    before = {v: value(runs, tier="jail", op="python", verdict=v) for v in ("ok", "error")}
    exec_before = value(runs, tier="jail", op="exec", verdict="ok")
    waits = value("codegym_sandbox_queue_wait_seconds_count", tier="jail")

    assert (await sandbox.run_python("print(1)")).verdict is Verdict.OK
    assert (await sandbox.run_python("1/0")).verdict is Verdict.ERROR
    assert (await sandbox.run(["true"])).verdict is Verdict.OK

    assert value(runs, tier="jail", op="python", verdict="ok") == before["ok"] + 1
    assert value(runs, tier="jail", op="python", verdict="error") == before["error"] + 1
    assert value(runs, tier="jail", op="exec", verdict="ok") == exec_before + 1
    assert value("codegym_sandbox_queue_wait_seconds_count", tier="jail") == waits + 3
    # The run took real time, so its latency landed in a finite bucket and the sum grew.
    assert value("codegym_sandbox_run_seconds_sum", tier="jail", op="python", verdict="ok") > 0

    text = generate_latest().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["codegym_sandbox_run_seconds"].samples
    assert any(
        s.name.endswith("_bucket")
        and s.labels == {"tier": "jail", "op": "python", "verdict": "error", "le": "+Inf"}
        for s in samples
    )


async def test_tests_op_is_its_own_series(sandbox: Sandbox) -> None:
    name = "codegym_sandbox_run_seconds_count"
    before = value(name, tier="jail", op="tests", verdict="ok")
    r = await sandbox.run_tests("x = 2", [AssertTest("assert x == 2")] * 3)
    assert r.passed
    assert value(name, tier="jail", op="tests", verdict="ok") == before + 1


async def test_pool_gauges_follow_busy_workers(sandbox: Sandbox) -> None:
    # Relative to a baseline: pools of other live fixtures also count under tier="jail".
    busy0 = value("codegym_sandbox_workers_busy", tier="jail")
    idle0 = value("codegym_sandbox_workers_idle", tier="jail")
    assert sandbox.pool_usage() == (0, 2) and idle0 >= 2
    task = asyncio.create_task(sandbox.run_python("import time; time.sleep(0.6)"))
    await await_until(lambda: sandbox.pool_usage()[0] == 1, timeout=30, what="a busy worker")
    assert value("codegym_sandbox_workers_busy", tier="jail") == busy0 + 1
    assert value("codegym_sandbox_workers_idle", tier="jail") == idle0 - 1
    assert (await task).ok
    assert value("codegym_sandbox_workers_busy", tier="jail") == busy0


async def test_closed_pool_leaves_the_gauges() -> None:
    async with Sandbox(workers=1) as sb:
        assert sb.pool_usage() == (0, 1)
    assert sb.pool_usage() == (0, 0)


async def test_waiting_callers_and_queue_wait_are_recorded() -> None:
    async with Sandbox(workers=1) as sb:
        wait_sum = value("codegym_sandbox_queue_wait_seconds_sum", tier="jail")
        first = asyncio.create_task(sb.run_python("import time; time.sleep(0.5)"))
        await await_until(lambda: sb.pool_usage()[0] == 1, timeout=30, what="a busy worker")
        waiting0 = value("codegym_sandbox_waiting", tier="jail")
        second = asyncio.create_task(sb.run_python("print(2)"))
        # the second call waits for the first
        await await_until(
            lambda: value("codegym_sandbox_waiting", tier="jail") == waiting0 + 1,
            timeout=30,
            what="the second call waiting",
        )
        waiting = value("codegym_sandbox_waiting", tier="jail")
        assert (await first).ok and (await second).stdout == "2\n"
        assert value("codegym_sandbox_waiting", tier="jail") == waiting - 1
        # the second call waited for most of the first one's sleep
        assert value("codegym_sandbox_queue_wait_seconds_sum", tier="jail") - wait_sum > 0.2


async def test_scheduled_and_replacing_recycles_are_counted() -> None:
    name = "codegym_sandbox_zygote_recycles_total"
    scheduled = value(name, tier="jail", cause="scheduled")
    replaced = value(name, tier="jail", cause="replaced")
    async with Sandbox(workers=1, recycle_after=2) as sb:
        for _ in range(3):
            assert (await sb.run_python("print(1)")).ok
        assert value(name, tier="jail", cause="scheduled") == scheduled + 1
        proc = sb._workers[0].proc  # fault injection: the zygote dies between runs
        assert proc is not None
        proc.kill()
        await proc.wait()
        assert (await sb.run_python("print(1)")).ok  # replaced, not failed
    assert value(name, tier="jail", cause="replaced") == replaced + 1


async def test_infra_errors_are_counted_by_bounded_reason() -> None:
    name = "codegym_sandbox_infra_errors_total"
    before = value(name, tier="jail", reason="session_lost")
    async with Session() as s:
        assert (await s.run(["true"])).ok
        proc = s._workers[0].proc  # fault injection: the session's only worker dies
        assert proc is not None
        proc.kill()
        await proc.wait()
        r = await s.run(["true"])
    assert r.verdict is Verdict.INFRA
    assert value(name, tier="jail", reason="session_lost") == before + 1


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("worker did not answer within 11.0s", "no_answer"),
        ("worker died (IncompleteReadError, exit -9): no output", "worker_died"),
        ("worker is not running", "worker_died"),
        ("could not restart the worker: worker did not start: x", "restart_failed"),
        ("protocol error: bad json", "protocol"),
        ("zygote error: fork failed", "zygote"),
        ("harness set-up failed: mount", "harness"),
        ("the run's init process died without a report", "init_died"),
        ("the session's worker died; its files are lost", "session_lost"),
        ("something new", "other"),
    ],
)
def test_infra_reasons_map_to_a_fixed_set(reason: str, kind: str) -> None:
    assert m.classify_infra_reason(reason) == kind
    assert kind in m.INFRA_REASONS


def test_rollout_eval_and_trainer_helpers_record() -> None:
    env = "test-env-helpers"
    with m.episode_in_flight(env):
        assert value("codegym_rollout_episodes_in_flight", env=env) == 1
        with m.time_stage("model", env=env):
            pass
        m.observe_stage("sandbox", 0.25, env=env)
    assert value("codegym_rollout_episodes_in_flight", env=env) == 0
    m.record_episode(env, "pass", staleness=2)
    m.rollout_infra_error(env, "policy_error")
    assert value("codegym_rollout_episodes_total", env=env, outcome="pass") == 1
    assert value("codegym_rollout_staleness_steps_bucket", env=env, le="2.0") == 1
    assert value("codegym_rollout_staleness_steps_bucket", env=env, le="1.0") == 0
    assert value("codegym_rollout_stage_seconds_count", env=env, stage="model") == 1
    assert value("codegym_rollout_stage_seconds_sum", env=env, stage="sandbox") == 0.25
    assert value("codegym_rollout_infra_errors_total", env=env, kind="policy_error") == 1
    with pytest.raises(ValueError, match=r"stage='modle'.*queue, model, tool, sandbox, reward"):
        m.observe_stage("modle", 1.0, env=env)

    ev = m.EvalProgress("test-suite", planned=4)
    assert value("codegym_eval_samples_planned", suite="test-suite") == 4
    with ev.in_flight():
        assert value("codegym_eval_samples_in_flight", suite="test-suite") == 1
    ev.record("pass", passed=True)
    ev.record("fail", passed=False)
    ev.record("infra", passed=False, infra=True)  # counted, but not in the pass rate
    assert value("codegym_eval_samples_total", suite="test-suite", outcome="infra") == 1
    assert value("codegym_eval_pass_rate", suite="test-suite") == 0.5

    m.record_trainer_step(7, 1.5, reward_mean=0.25, kl=0.01, loss=-0.3)
    assert value("codegym_trainer_step") == 7
    assert value("codegym_trainer_reward_mean") == 0.25
    assert value("codegym_trainer_kl") == 0.01
    assert value("codegym_trainer_loss") == -0.3


async def test_serve_metrics_serves_the_registry_on_loopback(sandbox: Sandbox) -> None:
    await sandbox.run_python("print(1)", limits=Limits(cpu_s=1))
    server = m.serve_metrics(0)
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        async with httpx.AsyncClient() as client:
            resp = await client.get(server.url, timeout=5)
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/plain")
        families = {f.name for f in text_string_to_metric_families(resp.text)}
        assert {"codegym_sandbox_run_seconds", "codegym_sandbox_workers_idle"} <= families
        assert 'codegym_sandbox_run_seconds_count{op="python",tier="jail",verdict="ok"}' in (
            resp.text
        )
    finally:
        server.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url, timeout=2)


def test_serve_metrics_on_a_taken_port_says_so() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(m.MetricsServerError, match=rf"127.0.0.1:{port}.*--metrics-port"):
            m.serve_metrics(port)
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        m.serve_metrics(70000)
