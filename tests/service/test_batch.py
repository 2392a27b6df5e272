"""Many runs in one request: ``POST /v1/batch``, and the client that batches its calls."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY
from service_support import HELD, TOKEN, Hold, Serve, Service

from codegym.sandbox import Limits, SandboxClosed, SandboxInputError
from codegym.service import Batching, RemoteSandbox, ServiceConfig, create_app, running
from codegym.testing import await_until

FAST = {"cpu_s": 1, "wall_s": 3}


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def _batch_runs_total() -> float:
    return REGISTRY.get_sample_value("codegym_service_batch_runs_total") or 0.0


# ---------------------------------------------------------------- the endpoint


async def test_a_batch_answers_each_run_on_its_own_line_as_it_ends(svc: Service) -> None:
    with Hold() as hold:  # the slow run ends once the other three lines came, not before
        runs = [
            {"key": "slow", "run": {"command": f"{hold.command}; echo late", "limits": HELD}},
            {"key": "a", "run": {"code": "print(6 * 7)"}},
            {"key": "b", "run": {"command": "echo no; exit 3", "limits": FAST}},
            {"key": "c", "run": {"code": "1", "command": "true"}},  # both: the caller's mistake
        ]
        lines: list[dict[str, Any]] = []
        async with svc.http.stream("POST", "/v1/batch", json={"runs": runs}) as r:
            assert r.status_code == 200, await r.aread()
            assert r.headers["content-type"] == "application/jsonl"
            capacity = {k: r.headers[k] for k in ("x-codegym-workers", "x-codegym-admits")}
            async for line in r.aiter_lines():
                lines += _lines(line)
                if len(lines) == 3:  # answered while the slow one still runs
                    assert 0 not in {line["index"] for line in lines}, lines
                    await hold.release()
    assert capacity == {"x-codegym-workers": "2", "x-codegym-admits": "10"}  # 2 + 4 × 2
    alone = await svc.http.post("/v1/run", json={"code": "print(1)"})
    assert alone.headers["x-codegym-workers"] == "2"
    by_index = {line["index"]: line for line in lines}
    assert sorted(by_index) == [0, 1, 2, 3] and len(lines) == 4
    assert lines[-1]["index"] == 0  # in the order the runs end: the slow one last
    assert by_index[0]["result"]["stdout"] == "late\n"
    assert by_index[1]["status"] == 200 and by_index[1]["result"]["stdout"] == "42\n"
    b = by_index[2]["result"]
    assert (b["verdict"], b["exit_code"], b["stdout"]) == ("error", 3, "no\n")
    assert by_index[3]["status"] == 400 and "either code" in by_index[3]["detail"]


async def test_a_run_of_a_batch_and_its_lone_retry_run_once(svc: Service) -> None:
    run = {"code": "import time; print(time.time_ns())"}
    r = await svc.http.post("/v1/batch", json={"runs": [{"key": "k-1", "run": run}]})
    (first,) = _lines(r.text)
    alone = await svc.http.post("/v1/run", json=run, headers={"Idempotency-Key": "k-1"})
    assert alone.json()["stdout"] == first["result"]["stdout"]  # the first answer, not a run
    other = {"key": "k-1", "run": {"code": "print(2)"}}
    (reused,) = _lines((await svc.http.post("/v1/batch", json={"runs": [other]})).text)
    assert reused["status"] == 400 and "different request" in reused["detail"]


async def test_a_full_queue_refuses_runs_of_a_batch_not_the_batch(serve: Serve) -> None:
    async with serve(workers=1, queue=0) as svc:
        with Hold() as hold:  # the admitted run holds its slot until the refusals came
            slow = {"command": hold.command, "limits": HELD}
            runs = [{"key": f"q{i}", "run": slow} for i in range(3)]
            lines: list[dict[str, Any]] = []
            async with svc.http.stream("POST", "/v1/batch", json={"runs": runs}) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    lines += _lines(line)
                    if len(lines) == 2:  # answered while the admitted one still runs
                        await hold.release()
        assert [line["status"] for line in lines] == [429, 429, 200], lines
        assert all(line["retry_after"] >= 1 for line in lines if line["status"] == 429)


async def test_malformed_batches_are_refused_whole(svc: Service) -> None:
    item = {"key": "x", "run": {"code": "print(1)"}}
    for body in (
        {"runs": []},
        {"runs": [{**item, "key": str(i)} for i in range(65)]},  # over MAX_BATCH
        {"runs": [{"run": {"code": "print(1)"}}]},  # a run without its key
        {"runs": [{**item, "key": "k" * 201}]},
    ):
        r = await svc.http.post("/v1/batch", json=body)
        assert r.status_code == 422, (body, r.text)
    assert svc.app.state.service.admission.admitted == 0


# ---------------------------------------------------------------- the client


async def test_concurrent_calls_share_batches_and_each_gets_its_own_answer(
    svc: Service,
) -> None:
    before = _batch_runs_total()
    async with RemoteSandbox(svc.url, token=TOKEN) as sb:
        assert (await sb.run_python("print(0)")).ok  # an answer says: 2 workers, 10 admitted
        results = await asyncio.gather(*(sb.run_python(f"print({i})") for i in range(40)))
        assert sb.batcher is not None
        batches, batched = sb.batcher.batches, sb.batcher.batched_runs
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]
    # 4 (2 per worker) went alone, the rest waited and left together, 10 at most in all
    assert batched >= 30 and batches < batched
    assert _batch_runs_total() - before == batched
    assert sb.retries == 0  # kept within what the service admits: no 429 on the way


async def test_without_batching_every_call_goes_alone(svc: Service) -> None:
    before = _batch_runs_total()
    async with RemoteSandbox(svc.url, token=TOKEN, batching=None) as sb:
        results = await asyncio.gather(*(sb.run_python(f"print({i})") for i in range(10)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    assert _batch_runs_total() == before


async def test_waiting_calls_leave_after_wait_s_even_while_the_pool_is_busy(
    svc: Service,
) -> None:
    policy = Batching(per_worker=1, wait_s=0.05)
    async with RemoteSandbox(svc.url, token=TOKEN, batching=policy) as sb:
        assert (await sb.run_python("print(0)")).ok  # learn the capacity: 2 workers
        with Hold() as hold:  # the lone calls run until released
            held = Limits(**HELD)
            slow = [sb.run(f"{hold.command}; echo slow", limits=held) for _ in range(2)]
            busy = asyncio.gather(*slow)
            # one run per worker on the wire: the next calls wait
            await await_until(lambda: sb._instances[0].in_flight == 2, timeout=30, what="2 on wire")
            quick = asyncio.gather(*(sb.run_python(f"print({i})") for i in range(3)))
            assert sb.batcher is not None
            batcher = sb.batcher
            await await_until(lambda: batcher.batched_runs == 3, timeout=30, what="3 batched")
            assert not busy.done()  # sent by the timer, not by a lone call ending
            await hold.release(2)
            assert [r.stdout for r in await quick] == ["0\n", "1\n", "2\n"]
            assert [r.stdout for r in await busy] == ["slow\n", "slow\n"]


async def test_a_caller_s_bad_input_in_a_batch_raises_for_that_caller_only(
    svc: Service,
) -> None:
    async with RemoteSandbox(svc.url, token=TOKEN, batching=Batching(per_worker=1)) as sb:
        assert (await sb.run_python("print(0)")).ok
        calls = [sb.run_python("print(1)"), sb.run_python("print(2)"), sb.run("true")]
        calls.append(sb.run_python("print(3)", files={"../escape": "x"}))
        results = await asyncio.gather(*calls, return_exceptions=True)
    assert [getattr(r, "stdout", None) for r in results[:2]] == ["1\n", "2\n"]
    assert isinstance(results[3], SandboxInputError), results[3]


async def test_a_service_without_batches_gets_every_call_alone() -> None:
    app = create_app(ServiceConfig(token=TOKEN, workers=1))
    app.add_middleware(_NoBatchRoute)
    async with running(app) as url, RemoteSandbox(url, token=TOKEN) as sb:
        assert (await sb.run_python("print(0)")).ok
        results = await asyncio.gather(*(sb.run_python(f"print({i})") for i in range(8)))
        assert sb.batcher is not None and not sb.batcher.enabled
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]


async def test_closing_the_client_fails_the_calls_still_waiting(svc: Service) -> None:
    sb = RemoteSandbox(svc.url, token=TOKEN, batching=Batching(per_worker=1, wait_s=60))
    assert (await sb.run_python("print(0)")).ok
    with Hold() as hold:  # the lone calls hold both workers until the end
        held = Limits(**HELD)
        lone = [asyncio.create_task(sb.run(hold.command, limits=held)) for _ in range(2)]
        await await_until(lambda: sb._instances[0].in_flight == 2, timeout=30, what="2 on wire")
        # both run (so leaving the hold ends them, not their wall limit)
        await await_until(lambda: len(hold.pids()) == 2, timeout=30, what="both holding")
        waiting = asyncio.create_task(sb.run_python("print(2)"))
        assert sb.batcher is not None
        batcher = sb.batcher
        await await_until(lambda: len(batcher._waiting) == 1, timeout=30, what="a call waiting")
        await sb.close()
        with pytest.raises(SandboxClosed):
            await waiting
        for task in lone:
            task.cancel()


def test_a_bad_batching_policy_names_the_fix() -> None:
    with pytest.raises(SandboxInputError, match="max_size <= 64"):
        Batching(max_size=65)
    with pytest.raises(SandboxInputError, match="per_worker >= 1"):
        Batching(per_worker=0.5)


class _NoBatchRoute:
    """A service from before ``/v1/batch``: that path answers 404."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/batch":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)
