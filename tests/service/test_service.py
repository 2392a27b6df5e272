"""The sandbox service over real HTTP on 127.0.0.1, with the real jail sandbox behind it."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx
import pytest
from service_support import HELD, TOKEN, Hold, Serve, Service
from typer.testing import CliRunner

from codegym.sandbox import (
    AssertTest,
    IOTest,
    Limits,
    Sandbox,
    SandboxError,
    SandboxInputError,
    Verdict,
)
from codegym.service import RemoteSandbox, ServiceConfig
from codegym.testing import await_until

FAST = {"cpu_s": 1, "wall_s": 3}

ROUTES = {
    ("/healthz", "get"),
    ("/readyz", "get"),
    ("/metrics", "get"),
    ("/v1/run", "post"),
    ("/v1/tests", "post"),
    ("/v1/batch", "post"),
    ("/v1/sessions", "post"),
    ("/v1/sessions/{sid}", "delete"),
    ("/v1/sessions/{sid}/exec", "post"),
    ("/v1/sessions/{sid}/files/{path}", "get"),
    ("/v1/sessions/{sid}/files/{path}", "put"),
    ("/v1/images", "get"),
    ("/v1/workspaces", "post"),
    ("/v1/workspaces/fork", "post"),
    ("/v1/workspaces/{wid}", "delete"),
    ("/v1/workspaces/{wid}/exec", "post"),
    ("/v1/workspaces/{wid}/files/{path}", "get"),
    ("/v1/workspaces/{wid}/files/{path}", "put"),
    ("/v1/workspaces/{wid}/diff", "get"),
    ("/v1/workspaces/{wid}/freeze", "post"),
}
"""Every (path, method) the service answers: a route moved, renamed or dropped fails."""


# ---------------------------------------------------------------- happy paths


async def test_run_python_with_stdin_files_and_argv(svc: Service) -> None:
    code = "import sys\nprint(sys.stdin.read().upper(), open('d/x.bin','rb').read(), sys.argv[1:])"
    body = {
        "code": code,
        "stdin": "abc",
        "argv": ["--n", "3"],
        "files": {"d/x.bin": {"base64": base64.b64encode(b"\x00\xff").decode()}},
        "limits": FAST,
    }
    r = await svc.http.post("/v1/run", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["verdict"] == "ok" and out["exit_code"] == 0
    assert out["stdout"] == "ABC b'\\x00\\xff' ['--n', '3']\n"
    assert set(out) >= {"signal", "stderr", "cpu_s", "wall_s", "peak_memory_mb", "truncated"}


async def test_run_command_reports_exit_status(svc: Service) -> None:
    r = await svc.http.post("/v1/run", json={"command": "echo hi; exit 3", "limits": FAST})
    out = r.json()
    assert (out["verdict"], out["exit_code"], out["stdout"]) == ("error", 3, "hi\n")


async def test_batch_of_100_tests_in_one_request(svc: Service) -> None:
    tests = [
        {"kind": "assert", "code": f"assert double({i}) == {2 * i + (i == 7)}"} for i in range(100)
    ]
    body = {"code": "def double(x):\n    return 2 * x\n", "tests": tests, "limits": FAST}
    r = await svc.http.post("/v1/tests", json=body)
    assert r.status_code == 200, r.text
    results = r.json()["tests"]
    assert len(results) == 100 and [t["index"] for t in results] == list(range(100))
    assert [t["passed"] for t in results] == [i != 7 for i in range(100)]


async def test_io_tests_with_binary_expected_output(svc: Service) -> None:
    async with RemoteSandbox(svc.url, token=TOKEN) as sb:
        tests = [IOTest("2\n", "4\n"), IOTest(b"3\n", b"6\n"), IOTest("5\n", "11\n")]
        r = await sb.run_tests("print(int(input()) * 2)", tests, limits=Limits(cpu_s=1))
    assert r.verdict is Verdict.OK
    assert [t.passed for t in r.tests] == [True, True, False]
    assert "wrong answer" in r.tests[2].detail


async def test_remote_and_in_process_sandbox_agree(svc: Service) -> None:
    """The same calls through RemoteSandbox and Sandbox give the same results."""
    limits = Limits(cpu_s=0.5, wall_s=2, memory_mb=128, output_bytes=1000)
    calls = [
        ("run_python", ("print(1)",), {}),
        ("run_python", ("import sys; print(sys.stdin.read()[::-1])", b"\xc3\xa9ab"), {}),
        ("run_python", ("raise ValueError('boom')",), {}),
        ("run_python", ("while True: pass",), {}),
        ("run_python", ("while True: print('x' * 100)",), {}),
        ("run_python", ("x = bytearray(400 << 20)",), {}),
        ("run_python", ("import os; os.kill(os.getpid(), 11)",), {}),
        ("run", ("cat data; echo; exit 4",), {"files": {"data": b"\x01\x02raw"}}),
        ("run_tests", ("def f(): return 1", [AssertTest("assert f() == 1")]), {}),
    ]
    async with Sandbox(workers=1) as local, RemoteSandbox(svc.url, token=TOKEN) as remote:
        for name, args, kwargs in calls:
            a = await getattr(local, name)(*args, limits=limits, **kwargs)
            b = await getattr(remote, name)(*args, limits=limits, **kwargs)
            same = ("verdict", "exit_code", "signal", "stdout", "truncated")
            assert [getattr(b, f) for f in same] == [getattr(a, f) for f in same], (name, a, b)
            pairs = [[(t.passed, t.verdict) for t in x.tests] for x in (a, b)]
            assert pairs[0] == pairs[1], name


async def test_session_files_persist_and_travel_as_raw_bytes(svc: Service) -> None:
    async with RemoteSandbox(svc.url, token=TOKEN) as sb, sb.session(disk_mb=16) as s:
        payload = bytes(range(256)) * 4
        await s.write_file("src/blob.bin", payload)
        r = await s.run("wc -c < src/blob.bin && echo made > out.txt")
        assert (r.verdict, r.stdout) == (Verdict.OK, "1024\n")
        assert await s.read_file("out.txt") == b"made\n"
        assert await s.read_file("src/blob.bin") == payload
        r = await s.run_python("print(open('out.txt').read().strip())")
        assert r.stdout == "made\n"
        with pytest.raises(FileNotFoundError):
            await s.read_file("missing.txt")
        sid = s.id
    gone = await svc.http.post(f"/v1/sessions/{sid}/exec", json={"command": "true"})
    assert gone.status_code == 404  # closed on exit
    assert len(svc.app.state.service.sessions) == 0


# ---------------------------------------------------------------- security


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["no-token", "wrong-token", "wrong-scheme"],
)
async def test_requests_without_the_right_token_are_refused(
    svc: Service, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(base_url=svc.url, headers=headers) as anon:
        calls = [("POST", "/v1/run"), ("POST", "/v1/sessions"), ("DELETE", "/v1/sessions/x")]
        calls += [("POST", "/v1/no-such-route")]  # refused before routing: no route is shown
        for method, path in calls:
            r = await anon.request(method, path, json={"code": "print(1)"})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
            assert r.json() == {"detail": "missing or wrong bearer token"}
        assert (await anon.get("/healthz")).status_code == 200  # probes need no token
    assert svc.app.state.service.admission.admitted == 0


async def test_the_token_scheme_is_case_insensitive_and_the_token_is_not(svc: Service) -> None:
    run = {"code": "print(1)"}
    for scheme in ("bearer", "BEARER"):
        auth = {"Authorization": f"{scheme} {TOKEN}"}
        r = await svc.http.post("/v1/run", json=run, headers=auth)
        assert r.status_code == 200 and r.json()["stdout"] == "1\n", r.text
    r = await svc.http.post(
        "/v1/run", json=run, headers={"Authorization": f"Bearer {TOKEN.upper()}"}
    )
    assert r.status_code == 401


async def test_without_auth_no_token_is_asked(serve: Serve) -> None:
    async with serve(token=None, auth=False) as svc, httpx.AsyncClient(base_url=svc.url) as anon:
        r = await anon.post("/v1/run", json={"code": "print(1)"})
        assert r.status_code == 200 and r.json()["stdout"] == "1\n", r.text
        spec = (await anon.get("/openapi.json")).json()
        assert "security" not in spec["paths"]["/v1/run"]["post"]


async def test_client_with_a_wrong_token_raises(svc: Service) -> None:
    async with RemoteSandbox(svc.url, token="nope-nope-nope-nope") as sb:
        with pytest.raises(SandboxError, match="refused the token"):
            await sb.run_python("print(1)")


def test_service_refuses_to_start_without_a_token() -> None:
    with pytest.raises(ValueError, match="CODEGYM_TOKEN"):
        ServiceConfig(token=None)
    ServiceConfig(token=None, auth=False)  # only when asked explicitly


def test_cli_refuses_to_start_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from codegym.service._cli import serve

    monkeypatch.delenv("CODEGYM_TOKEN", raising=False)
    app = typer.Typer()
    app.command()(serve)
    result = CliRunner().invoke(app, ["--port", "0"])
    assert result.exit_code == 2
    assert "needs a bearer token" in result.output


async def test_oversized_body_is_refused_with_413(serve: Serve) -> None:
    async with serve(max_body_bytes=64 << 10) as svc:
        big = {"code": "print(1)", "stdin": "x" * (65 << 10)}
        r = await svc.http.post("/v1/run", json=big)
        assert r.status_code == 413 and "larger than" in r.json()["detail"]

        async def chunks():  # no Content-Length: counted as it arrives
            for _ in range(100):
                yield b"x" * 4096

        r = await svc.http.post("/v1/run", content=chunks())
        assert r.status_code == 413
        ok = await svc.http.post("/v1/run", json={"code": "print(1)"})
        assert ok.json()["stdout"] == "1\n"


async def test_oversized_file_is_refused_with_413(serve: Serve) -> None:
    async with serve(max_file_bytes=1000) as svc:
        r = await svc.http.post("/v1/run", json={"code": "1", "files": {"f": "x" * 1001}})
        assert r.status_code == 413 and "'f'" in r.json()["detail"]
        sid = (await svc.http.post("/v1/sessions", json={})).json()["id"]
        r = await svc.http.put(f"/v1/sessions/{sid}/files/big", content=b"x" * 1001)
        assert r.status_code == 413


@pytest.mark.parametrize(
    "path",
    [
        "..%2f..%2fetc%2fpasswd",
        "a/%2e%2e/%2e%2e/b",
        "%2fetc%2fpasswd",
        "/etc/passwd",
        "a%00b",
        "a//b",
        "%2e",
        "a/%2e/b",
    ],
)
async def test_path_traversal_in_the_file_api_is_refused(svc: Service, path: str) -> None:
    sid = (await svc.http.post("/v1/sessions", json={})).json()["id"]
    put = await svc.http.put(f"/v1/sessions/{sid}/files/{path}", content=b"x")
    get = await svc.http.get(f"/v1/sessions/{sid}/files/{path}")
    assert (put.status_code, get.status_code) == (400, 400), (put.text, get.text)
    assert "must be relative" in put.json()["detail"]


async def test_path_traversal_in_run_files_is_refused(svc: Service) -> None:
    async with RemoteSandbox(svc.url, token=TOKEN) as sb:
        with pytest.raises(SandboxInputError, match="must be relative"):
            await sb.run_python("print(1)", files={"../escape": "x"})


async def test_bad_input_gets_400_naming_it(svc: Service) -> None:
    r = await svc.http.post("/v1/run", json={"code": "print(1)", "limits": {"cpu_s": -1}})
    assert r.status_code == 400 and "Limits.cpu_s" in r.json()["detail"]
    r = await svc.http.post("/v1/run", json={"code": "1", "command": "true"})
    assert r.status_code == 400 and "either code" in r.json()["detail"]
    r = await svc.http.post("/v1/run", json={"code": "1", "stdin": {"base64": "!!"}})
    assert r.status_code == 400 and "base64" in r.json()["detail"]
    r = await svc.http.post("/v1/run", json={"code": "1", "bogus": 1})
    assert r.status_code == 422


# ---------------------------------------------------------------- back-pressure


async def test_full_queue_answers_429_with_retry_after(serve: Serve) -> None:
    async with serve(workers=1, queue=1) as svc:
        with Hold() as hold:  # the slow runs last until released, however busy the host
            slow = {"command": f"{hold.command}; echo slow", "limits": HELD}
            running = [asyncio.create_task(svc.http.post("/v1/run", json=slow)) for _ in (1, 2)]

            async def queue_full() -> bool:  # one runs, one waits
                return "codegym_service_queue_depth 1.0" in (await svc.http.get("/metrics")).text

            await await_until(queue_full, timeout=30, what="one run waiting in the queue")
            r = await svc.http.post("/v1/run", json={"code": "print(1)"})
            assert r.status_code == 429, r.text
            assert int(r.headers["retry-after"]) >= 1
            await hold.release()  # the running one; then the one that waited runs
            await hold.release()
            done = await asyncio.gather(*running)
        assert [(t.status_code, t.json()["stdout"]) for t in done] == [(200, "slow\n")] * 2
        metrics = (await svc.http.get("/metrics")).text
        assert 'codegym_service_rejected_total{reason="overloaded"}' in metrics
        assert (await svc.http.post("/v1/run", json={"code": "print(1)"})).status_code == 200


async def test_client_honours_429_and_finishes_every_call(serve: Serve) -> None:
    async with serve(workers=1, queue=0) as svc, RemoteSandbox(svc.url, token=TOKEN) as sb:
        results = await asyncio.gather(
            *(sb.run_python(f"import time; time.sleep(0.05); print({i})") for i in range(6))
        )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert sb.retries > 0  # it was refused on the way and came back


# ---------------------------------------------------------------- idempotency


async def test_same_idempotency_key_runs_once(svc: Service) -> None:
    sid = (await svc.http.post("/v1/sessions", json={})).json()["id"]
    url = f"/v1/sessions/{sid}/exec"
    k1 = {"Idempotency-Key": "k1"}
    store = svc.app.state.service.idempotency
    with Hold() as hold:
        held = {"command": f"echo run >> log; {hold.command}; wc -l < log", "limits": HELD}
        first = asyncio.create_task(svc.http.post(url, json=held, headers=k1))
        await await_until(hold.pids, timeout=30, what="the first request's run started")
        second = asyncio.create_task(svc.http.post(url, json=held, headers=k1))
        # the second arrives while the first still runs (held), and joins it
        await await_until(lambda: store.replays == 1, timeout=30, what="the second joined")
        assert not first.done()
        await hold.release()
        first_r, second_r = await asyncio.gather(first, second)
    third = await svc.http.post(url, json=held, headers=k1)
    assert first_r.json()["stdout"] == second_r.json()["stdout"] == "1\n", second_r.text
    assert third.json()["stdout"] == "1\n"  # and after it ended: the answer, not a run
    append = {"command": "echo run >> log; wc -l < log", "limits": FAST}
    fresh = await svc.http.post(url, json=append, headers={"Idempotency-Key": "k2"})
    assert fresh.json()["stdout"] == "2\n"  # a new key runs again
    other = await svc.http.post(url, json={"command": "true"}, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 400 and "different request" in other.json()["detail"]
    long_key = await svc.http.post(url, json=append, headers={"Idempotency-Key": "k" * 201})
    assert long_key.status_code == 400 and "at most 200" in long_key.json()["detail"]
    metrics = (await svc.http.get("/metrics")).text
    assert "codegym_service_idempotent_replays_total" in metrics


# ---------------------------------------------------------------- sessions


async def test_idle_sessions_are_collected(serve: Serve) -> None:
    async with serve(session_ttl_s=1.0) as svc:
        sids = [(await svc.http.post("/v1/sessions", json={})).json()["id"]]
        # a session kept busy past its TTL is not collected under it
        busy = asyncio.create_task(
            svc.http.post(f"/v1/sessions/{sids[0]}/exec", json={"command": "sleep 1.5"})
        )
        sids.append((await svc.http.post("/v1/sessions", json={})).json()["id"])
        assert (await busy).json()["verdict"] == "ok"
        deadline = time.monotonic() + 5
        while len(svc.app.state.service.sessions) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(svc.app.state.service.sessions) == 0
        r = await svc.http.post(f"/v1/sessions/{sids[1]}/exec", json={"command": "true"})
        assert r.status_code == 404 and "expired" in r.json()["detail"]
        assert "codegym_service_sessions_open 0.0" in (await svc.http.get("/metrics")).text


async def test_open_sessions_are_capped(serve: Serve) -> None:
    async with serve(max_sessions=2) as svc:
        for _ in range(2):
            assert (await svc.http.post("/v1/sessions", json={})).status_code == 201
        r = await svc.http.post("/v1/sessions", json={})
        assert r.status_code == 429 and "retry-after" in r.headers


# ---------------------------------------------------------------- health, metrics, spec


async def test_health_readiness_metrics_and_openapi(svc: Service) -> None:
    async with httpx.AsyncClient(base_url=svc.url) as anon:
        assert (await anon.get("/healthz")).json()["status"] == "ok"
        ready = await anon.get("/readyz")
        assert ready.status_code == 200 and ready.json()["workers"] == 2
        await svc.http.post("/v1/run", json={"code": "print(1)"})
        refused = await anon.post("/v1/sessions/abc/exec", json={"argv": ["true"]})
        assert refused.status_code == 401
        text = (await anon.get("/metrics")).text
        # a 401 is answered before routing, and still labelled with its route's template
        assert 'method="POST",route="/v1/sessions/{sid}/exec",status="401"' in text
        assert 'codegym_service_requests_total{method="POST",route="/v1/run",status="200"}' in text
        assert "codegym_service_request_seconds_bucket" in text
        assert "codegym_service_in_flight" in text
        assert "python_gc_objects_collected_total" in text  # the default registry is exported
        spec = (await anon.get("/openapi.json")).json()
        routes = {(path, method) for path, ops in spec["paths"].items() for method in ops}
        assert routes == ROUTES, (sorted(routes - ROUTES), sorted(ROUTES - routes))
        scheme = spec["components"]["securitySchemes"]["bearer"]
        assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
        for path, operations in spec["paths"].items():
            for op in operations.values():
                want = [{"bearer": []}] if path.startswith("/v1/") else None
                assert op.get("security") == want, (path, op.get("security"))
        for path in ("/v1/run", "/v1/tests", "/v1/sessions/{sid}/exec"):
            params = spec["paths"][path]["post"]["parameters"]
            key = next(p for p in params if p["name"] == "Idempotency-Key")
            assert key["in"] == "header" and key["schema"]["maxLength"] == 200
        fields = spec["components"]["schemas"]["ExecResultModel"]["properties"]
        assert "description" in fields["verdict"]  # field docstrings reach the spec
