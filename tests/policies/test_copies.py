"""OpenAIPolicy's retries at once and copies of a request (``Retry.at_once``, ``Hedge``):
a fast failure is retried without a wait, tail copies use only idle room, the first good
answer wins, and a request that fails in every copy fails as it would without copies."""

from __future__ import annotations

import asyncio

import pytest

from codegym.policies import Hedge, OpenAIPolicy, PolicyError, Retry, SamplingParams
from codegym.testing import FakeOpenAIServer

SEEDED = SamplingParams(seed=1)
"""Copies are made only of requests that sample the same thing again: greedy ones, and
seeded ones with ``Hedge(seeded=True)`` (the fake server's answers do not vary)."""
NO_HEDGE = 1000.0  # a Hedge.factor that never fires in these tests: only tail copies act


def test_only_the_first_retry_of_a_fast_failure_skips_the_backoff() -> None:
    r = Retry(base_s=0.5, max_s=8.0, jitter=False)
    assert r.delay(0, fast=True) == 0.0
    assert r.delay(1, fast=True) == 1.0 and r.delay(2, fast=True) == 2.0  # repeated: backoff
    assert r.delay(0) == 0.5  # a timeout, 429 or 408 is not fast
    assert r.delay(0, retry_after_s=2.0, fast=True) == 2.0  # the server asked to wait
    assert Retry(base_s=0.5, jitter=False, at_once=False).delay(0, fast=True) == 0.5


@pytest.mark.parametrize("kind", ["server_error", "drop", "garbage"])
async def test_a_first_fast_failure_is_retried_without_waiting(kind: str) -> None:
    # A 30 s backoff would outlast the 10 s bound: only an immediate retry passes.
    with FakeOpenAIServer() as srv:
        srv.fail(kind, times=1)  # type: ignore[arg-type]
        retry = Retry(attempts=2, base_s=30.0, max_s=30.0, jitter=False)
        async with OpenAIPolicy(srv.base_url, srv.model, retry=retry) as p:
            async with asyncio.timeout(10):
                (g,) = await p.generate("x", SEEDED)
        assert g.text and srv.requests == 2


async def test_a_failing_server_gets_backoff_even_for_first_retries() -> None:
    """ "Otherwise healthy" is the policy's recent attempts: after a run of failures the
    first retry waits its backoff too."""
    with FakeOpenAIServer() as srv:
        srv.fail("server_error", times=1000)
        retry = Retry(attempts=2, base_s=30.0, max_s=30.0, jitter=False)
        async with OpenAIPolicy(srv.base_url, srv.model, retry=retry) as p:
            at_once = 0
            while True:  # each call: 2 failed attempts, unless its retry waits 30 s
                try:
                    async with asyncio.timeout(2):
                        await p.generate("x", SEEDED)
                except PolicyError:
                    at_once += 1
                    assert at_once < 20, "a failing server never got backoff"
                except TimeoutError:
                    break
        assert at_once >= 2  # a lone failure on a healthy server was retried at once


async def _warm(p: OpenAIPolicy) -> None:
    """Two rounds of ``concurrency`` requests: the policy learns the usual latency."""
    for _ in range(2):
        await asyncio.gather(*(p.generate("x", SEEDED) for _ in range(p.concurrency)))


def _policy(srv: FakeOpenAIServer, **kw: object) -> OpenAIPolicy:
    kw.setdefault("retry", Retry(attempts=1))
    kw.setdefault("hedge", Hedge(factor=NO_HEDGE, warmup=8, tail=4, tail_quiet=0.5, seeded=True))
    return OpenAIPolicy(srv.base_url, srv.model, concurrency=4, **kw)  # type: ignore[arg-type]


async def test_tail_copies_only_fill_idle_room_and_the_first_answer_wins() -> None:
    """Four requests, one hanging: once the other three are answered their room is idle,
    and copies of the hanging one fill it; one answers, the rest are cancelled. With one
    attempt and a 30 s timeout only a copy can answer it in time."""
    with FakeOpenAIServer(latency_s=0.05) as srv:
        async with _policy(srv, timeout_s=30.0) as p:
            await _warm(p)
            srv.latency_s = 0.5  # ten usual latencies, but every slot is busy: no copies

            async def copies_while_busy() -> int:
                while srv.in_flight < 4:  # the server holds all four
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.2)  # 8 x tail_quiet x usual into the busy stretch
                return p.tail_copies

            *_, busy = await asyncio.gather(
                *(p.generate("x", SEEDED) for _ in range(4)), copies_while_busy()
            )
            assert busy == 0
            srv.latency_s = 0.05
            await _warm(p)  # the usual latency back at 50 ms
            copies = p.tail_copies
            srv.fail("hang", times=1, hang_s=30.0)
            async with asyncio.timeout(10):
                gens = await asyncio.gather(*(p.generate("x", SEEDED) for _ in range(4)))
            assert all(g.text for (g,) in gens)
            assert p.tail_copies > copies and p.tail_wins == 1 and p.hedges == 0
            assert p.on_wire == 0  # the losers (the hang included) were cancelled


async def test_one_request_at_a_time_gets_no_tail_copies() -> None:
    with FakeOpenAIServer(latency_s=0.02) as srv:
        async with _policy(srv, timeout_s=0.5) as p:
            for _ in range(10):
                await p.generate("x", SEEDED)
            srv.fail("hang", times=1, hang_s=30.0)
            with pytest.raises(PolicyError) as e:
                await p.generate("x", SEEDED)
        assert e.value.kind == "timeout" and p.tail_copies == 0 and srv.requests == 11


async def test_a_request_failing_in_every_copy_fails_as_its_original() -> None:
    """The original hangs and its tail copies get 500s: the error is the original's kind
    (``timeout``), as without copies, never the copies' ``http_status``."""
    with FakeOpenAIServer(latency_s=0.05) as srv:
        async with _policy(srv, timeout_s=1.0) as p:
            await _warm(p)
            n = srv.requests
            srv.fail("hang", at=n + 1, hang_s=30.0)
            srv.fail("server_error", at=range(n + 5, n + 100))  # every copy fails
            results = await asyncio.gather(
                *(p.generate("x", SEEDED) for _ in range(4)), return_exceptions=True
            )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], PolicyError)
        assert errors[0].kind == "timeout" and errors[0].attempts == 1
        assert p.tail_copies >= 3 and p.tail_wins == 0 and p.on_wire == 0


async def test_hedges_stay_within_their_budget() -> None:
    """Every request hangs once warmed up: at most budget x concurrency hedges go out."""
    with FakeOpenAIServer(latency_s=0.02) as srv:
        hedge = Hedge(factor=2.0, warmup=8, budget=0.25, tail=1, seeded=True)
        async with OpenAIPolicy(
            srv.base_url, srv.model, concurrency=8, timeout_s=0.5, retry=Retry(attempts=1),
            hedge=hedge,
        ) as p:  # fmt: skip
            for _ in range(2):
                await asyncio.gather(*(p.generate("x", SEEDED) for _ in range(8)))
            srv.fail("hang", times=100, hang_s=30.0)
            results = await asyncio.gather(
                *(p.generate("x", SEEDED) for _ in range(8)), return_exceptions=True
            )
        assert all(isinstance(r, PolicyError) and r.kind == "timeout" for r in results)
        assert p.hedges == 2 and p.tail_copies == 0  # 0.25 x 8 in flight at once


async def test_a_rollout_with_copies_counts_every_episode_once() -> None:
    """Hangs, 500s and drops with hedges and tail copies: every episode is scored or
    excluded exactly once, whichever copy answered it."""
    from codegym.envs import Env, Resources, StepResult, Turn, register
    from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
    from codegym.tasks import IOCase, Task

    @register("test_copies_once")
    class Once(Env):
        async def reset(self, task: Task, seed: int) -> list[dict[str, object]]:
            return [{"role": "user", "content": task.prompt}]

        async def step(self, turn: Turn) -> StepResult:
            return StepResult(done=True, reward=1.0, outcome="pass")

    with FakeOpenAIServer(latency_s=0.05) as srv:
        for kind, at in (("hang", range(20, 200, 9)), ("server_error", range(24, 200, 7))):
            srv.fail(kind, at=at, hang_s=30.0)  # type: ignore[arg-type]
        srv.fail("drop", at=range(26, 200, 11))
        hedge = Hedge(factor=1.5, warmup=8, tail=4, seeded=True)
        async with OpenAIPolicy(
            srv.base_url, srv.model, mode="chat", concurrency=16, timeout_s=1.0, hedge=hedge,
            retry=Retry(attempts=3, base_s=0.01),
        ) as p:  # fmt: skip
            ex = LocalExecutor(EnvSpec("test_copies_once"), p, SamplingParams(), Resources())
            engine = RolloutEngine(ex, RolloutConfig(group_size=4, model_concurrency=16))
            tasks = [
                Task(id=f"t{i}", prompt=f"p{i}", io_cases=(IOCase("", ""),)) for i in range(16)
            ]
            groups = [g async for g in engine.run(tasks)]
        assert p.tail_copies > 0 and p.on_wire == 0
    seen = [(g.task.id, t.index) for g in groups for t in g.trajectories]
    seen += [(g.task.id, e.index) for g in groups for e in g.excluded]
    assert sorted(seen) == sorted({(t.id, i) for t in tasks for i in range(4)})
    s = engine.stats.summary()
    assert s["requested"] == 64 == s["scored"] + s["excluded_total"]


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.7)])
async def test_an_unseeded_sampled_request_is_never_copied(params: SamplingParams) -> None:
    """A copy of it would be another sample; keeping whichever answers first would favour
    short completions. So a hang is waited out (here: the attempt's timeout, then a retry)."""
    with FakeOpenAIServer(latency_s=0.05) as srv:
        hedge = Hedge(factor=1.0, warmup=4)
        async with _policy(srv, timeout_s=1.0, hedge=hedge, retry=Retry(attempts=2)) as p:
            await _warm(p)  # seeded: its own tail may be copied
            before = p.tail_copies + p.hedges
            srv.fail("hang", times=1, hang_s=30.0)
            gens = await asyncio.gather(*(p.generate("x", params) for _ in range(4)))
            assert all(g.text for (g,) in gens)
            assert p.tail_copies + p.hedges == before
    greedy = SamplingParams(temperature=0.0)
    with FakeOpenAIServer(latency_s=0.05) as srv:
        async with _policy(srv, timeout_s=30.0, hedge=Hedge(factor=1.0, warmup=4)) as p:
            await _warm(p)
            before = p.tail_copies + p.hedges
            srv.fail("hang", times=1, hang_s=30.0)
            async with asyncio.timeout(10):  # greedy: copied, so the hang costs no timeout
                await asyncio.gather(*(p.generate("x", greedy) for _ in range(4)))
            assert p.tail_copies + p.hedges > before


async def test_a_garbled_answer_from_a_copy_does_not_beat_a_good_original() -> None:
    """Found by a review: any status under 400 used to win the race, so a copy's fast
    garbled 200 cancelled a good original and turned a success into bad_response."""
    import json

    from codegym.policies.openai_policy import _parses, _Race

    good = json.dumps({"choices": [{"text": "ok", "finish_reason": "stop", "index": 0}]}).encode()
    answers = iter([(0.2, good), (0.0, b'{"choices": [{"text": "oo')])

    async def post() -> tuple[int, bytes, str | None]:
        delay, body = next(answers)
        await asyncio.sleep(delay)
        return 200, body, None

    p = OpenAIPolicy("http://127.0.0.1:9/v1", "m", hedge=Hedge(tail=4, seeded=True))
    race = _Race(p, post, True, lambda a: _parses(a[1], "completions", 1))
    race.add("original")
    race.add("tail")  # answers first, garbled
    winner = await asyncio.wait_for(race.winner, 5)
    assert winner.result()[1] == good and p.tail_wins == 0
