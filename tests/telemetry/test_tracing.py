"""Traces: spans nest policy → tool → sandbox → reward under one episode, across concurrent
asyncio tasks, and reach a JSON-lines file or a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from codegym.sandbox import Sandbox, Verdict
from codegym.telemetry import tracing
from codegym.telemetry.tracing import configure_tracing, shutdown_tracing, span


@pytest.fixture(autouse=True)
def _tracing_off() -> Iterator[None]:
    yield
    shutdown_tracing()


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def episode(sb: Sandbox, n: int) -> None:
    with span("episode", env="test", episode=n):
        with span("policy.call", model="tiny"):
            await asyncio.sleep(0.01)
        with span("tool", tool="python"):
            r = await sb.run_python(f"print({n})")
            assert r.stdout == f"{n}\n"
        with span("reward") as s:
            s.set_attribute("reward", 1.0)


async def test_concurrent_episodes_nest_their_own_stages(sandbox: Sandbox, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "traces.jsonl"
    configure_tracing("file", path=out)
    assert tracing.tracing_enabled()
    await asyncio.gather(*(episode(sandbox, n) for n in range(3)))
    shutdown_tracing()
    assert not tracing.tracing_enabled()

    spans = read_spans(out)
    by_id = {s["span_id"]: s for s in spans}
    episodes = [s for s in spans if s["name"] == "episode"]
    assert len(episodes) == 3 and len(spans) == 3 * 5
    assert len({e["trace_id"] for e in episodes}) == 3  # one trace per episode
    for ep in episodes:
        assert ep["parent_span_id"] is None and ep["service"] == "codegym"
        kids = {s["name"]: s for s in spans if s["parent_span_id"] == ep["span_id"]}
        assert set(kids) == {"policy.call", "tool", "reward"}
        execs = [s for s in spans if s["parent_span_id"] == kids["tool"]["span_id"]]
        assert [s["name"] for s in execs] == ["sandbox.exec"]
        ex = execs[0]
        assert ex["trace_id"] == ep["trace_id"]
        assert ex["attributes"]["verdict"] == "ok" and ex["attributes"]["op"] == "python"
        assert ex["attributes"]["tier"] == "jail"
        assert ex["attributes"]["wall_s"] > 0 and ex["attributes"]["cpu_s"] >= 0
        assert ex["start_ns"] >= kids["tool"]["start_ns"] and ex["end_ns"] <= kids["tool"]["end_ns"]
        assert kids["reward"]["attributes"]["reward"] == 1.0
    for s in spans:  # every parent is a span of the same trace
        if s["parent_span_id"]:
            assert by_id[s["parent_span_id"]]["trace_id"] == s["trace_id"]


async def test_a_failing_block_marks_its_span(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    configure_tracing("file", path=out)
    with pytest.raises(ZeroDivisionError), span("episode", skipped=None):
        1 / 0  # noqa: B018
    shutdown_tracing()
    (s,) = read_spans(out)
    assert s["status"] == "ERROR" and "skipped" not in s["attributes"]
    assert s["events"][0]["name"] == "exception"
    assert s["events"][0]["attributes"]["exception.type"] == "ZeroDivisionError"


async def test_infra_verdict_marks_the_sandbox_span(tmp_path: Path) -> None:
    from codegym.sandbox import Session

    out = tmp_path / "t.jsonl"
    configure_tracing("file", path=out)
    async with Session() as s:
        await s.run(["true"])
        proc = s._workers[0].proc  # fault injection: the session's worker dies
        assert proc is not None
        proc.kill()
        await proc.wait()
        assert (await s.run(["true"])).verdict is Verdict.INFRA
    shutdown_tracing()
    ok, infra = read_spans(out)
    assert ok["status"] == "UNSET" and infra["status"] == "ERROR"
    assert infra["attributes"]["verdict"] == "infra" and "session" in infra["status_message"]


async def test_off_by_default_records_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    assert not tracing.tracing_enabled()
    with span("episode") as s:
        assert not s.is_recording()
        await sandbox.run_python("print(1)")
    configure_tracing("none")
    with span("episode") as s:
        assert not s.is_recording()


def test_bad_configuration_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(tracing.TracingConfigError, match=r"'jaeger'.*file, console, otlp, none"):
        configure_tracing("jaeger")  # type: ignore[arg-type]
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(tracing.TracingConfigError, match="cannot write traces to"):
        configure_tracing("file", path=blocker / "traces.jsonl")


def test_console_exporter_prints_spans(capsys: pytest.CaptureFixture[str]) -> None:
    configure_tracing("console")
    with span("hello", n=1):
        pass
    shutdown_tracing()
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == "hello" and printed["attributes"] == {"n": 1}


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    bodies: list[tuple[str, bytes]] = []
    handler = type("Handler", (_Receiver,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", bodies
    server.shutdown()
    server.server_close()


def decode(bodies: list[tuple[str, bytes]]) -> list[tuple[str, str, bytes]]:
    out = []
    for path, body in bodies:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                out += [(path, s.name, s.parent_span_id) for s in ss.spans]
    return out


def test_otlp_exports_to_the_configured_endpoint(
    otlp_receiver: tuple[str, list[tuple[str, bytes]]],
) -> None:
    base, bodies = otlp_receiver
    configure_tracing("otlp", endpoint=f"{base}/v1/traces")
    with span("episode"), span("reward"):
        pass
    shutdown_tracing()
    got = decode(bodies)
    assert sorted(name for _, name, _ in got) == ["episode", "reward"]
    assert all(path == "/v1/traces" for path, _, _ in got)
    parents = {name: parent for _, name, parent in got}
    assert parents["episode"] == b"" and len(parents["reward"]) == 8


def test_otlp_env_endpoint_is_respected(
    otlp_receiver: tuple[str, list[tuple[str, bytes]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, bodies = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    configure_tracing()  # no exporter named: the variable selects OTLP
    with span("from-env"):
        pass
    shutdown_tracing()
    assert [(p, n) for p, n, _ in decode(bodies)] == [("/v1/traces", "from-env")]


async def test_eval_samples_are_traced_like_episodes(sandbox: Sandbox, tmp_path: Path) -> None:
    """An eval's task is one trace: its model call and the sandbox runs that score its
    samples nest under it, as an episode's stages do."""
    from codegym.evals.runner import Runner, RunnerConfig
    from codegym.policies import OpenAIPolicy, SamplingParams
    from codegym.tasks import load_humaneval
    from codegym.testing import FakeOpenAIServer

    out = tmp_path / "traces.jsonl"
    configure_tracing("file", path=out)
    tasks = load_humaneval()[:2]
    with FakeOpenAIServer() as srv:
        async with OpenAIPolicy(srv.base_url, srv.model) as policy:
            runner = Runner(sandbox, config=RunnerConfig(suite="humaneval"))
            results = await runner.evaluate(tasks, policy, SamplingParams(n=2, max_tokens=32))
    shutdown_tracing()
    spans = read_spans(out)
    roots = [s for s in spans if s["name"] == "eval.task"]
    assert sorted(r["attributes"]["task"] for r in roots) == sorted(t.id for t in tasks)
    for root in roots:
        assert root["parent_span_id"] is None and root["attributes"]["suite"] == "humaneval"
        inside = [s for s in spans if s["trace_id"] == root["trace_id"]]
        assert [s["name"] for s in inside].count("policy.call") == 1
        scored = [r for r in results if r.task_id == root["attributes"]["task"]]
        runs = [s for s in inside if s["name"] == "sandbox.exec"]
        assert len(runs) == sum(r.outcome not in ("no_code", "truncated") for r in scored)
