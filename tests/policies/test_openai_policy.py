"""OpenAIPolicy against the real fake server: results, token detail, retries, give-ups."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from codegym.policies import Hedge, OpenAIPolicy, PolicyError, Retry, SamplingParams
from codegym.policies.retry import Latencies
from codegym.testing import FakeOpenAIServer, FakeReply

FAST = Retry(attempts=4, base_s=0.01, max_s=0.5)


def policy(srv: FakeOpenAIServer, **kw: object) -> OpenAIPolicy:
    kw.setdefault("retry", FAST)
    return OpenAIPolicy(srv.base_url, srv.model, **kw)  # type: ignore[arg-type]


async def test_completions_n_with_token_ids_and_logprobs(srv: FakeOpenAIServer) -> None:
    prompt = "def add(a, b):\n"
    async with policy(srv, logprobs=True, token_ids=True) as p:
        gens = await p.generate(prompt, SamplingParams(n=3, seed=7))
    assert len(gens) == 3
    for g in gens:
        assert g.token_ids is not None and g.logprobs is not None
        assert "".join(map(chr, g.token_ids)) == g.text  # the fake's tokenizer: ord(char)
        assert len(g.logprobs) == len(g.token_ids) == g.tokens_out
        assert all(lp <= 0 for lp in g.logprobs)
        assert g.prompt_token_ids == tuple(map(ord, prompt))
        assert g.tokens_in == len(prompt) and g.finish_reason == "stop" and g.model_s > 0
    body = srv.bodies[-1]
    assert body["n"] == 3 and body["seed"] == 7 and body["return_token_ids"] is True
    assert body["return_tokens_as_token_ids"] is True


async def test_plain_request_sends_no_vllm_fields(srv: FakeOpenAIServer) -> None:
    async with policy(srv) as p:
        (g,) = await p.generate("x = ", SamplingParams())
    assert g.token_ids is None and g.logprobs is None and g.tokens_out == len(g.text)
    assert "return_token_ids" not in srv.bodies[-1] and "logprobs" not in srv.bodies[-1]


async def test_ids_recovered_from_logprob_tokens_alone(srv: FakeOpenAIServer) -> None:
    # return_tokens_as_token_ids without return_token_ids: ids come from "token_id:N"
    async with policy(srv, logprobs=True, extra_body={"return_tokens_as_token_ids": True}) as p:
        (g,) = await p.generate("def f():\n", SamplingParams())
    assert g.token_ids == tuple(map(ord, g.text))


async def test_same_seed_same_text_and_stop_max_tokens(srv: FakeOpenAIServer) -> None:
    async with policy(srv) as p:
        a = await p.generate("def f(x):\n", SamplingParams(n=4, seed=3))
        b = await p.generate("def f(x):\n", SamplingParams(n=4, seed=3))
        cut = await p.generate("def f(x):\n", SamplingParams(max_tokens=5))
        stopped = await p.generate("def f(x):\n", SamplingParams(stop=("return",)))
    assert [g.text for g in a] == [g.text for g in b]
    assert cut[0].finish_reason == "length" and len(cut[0].text) == 5
    assert stopped[0].text == "    " and stopped[0].finish_reason == "stop"
    assert srv.bodies[-1]["stop"] == ["return"]


async def test_chat_mode_tools_and_prompt_ids() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}

    def responder(prompt: object, params: SamplingParams, index: int) -> FakeReply:
        return FakeReply("calling", tool_calls=(call,))

    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    with FakeOpenAIServer(responder=responder) as srv:
        async with policy(srv, mode="chat", tools=tools, token_ids=True) as p:
            msgs = [{"role": "user", "content": "hi"}]
            gens = await p.generate(msgs, SamplingParams(n=2))
        assert [g.tool_calls for g in gens] == [(call,), (call,)]
        assert gens[0].finish_reason == "tool_calls" and gens[0].text == "calling"
        assert gens[0].prompt_token_ids == tuple(map(ord, "<|user|>hi\n"))
        assert srv.bodies[-1]["tools"] == tools


async def test_completions_mode_rejects_messages(srv: FakeOpenAIServer) -> None:
    with pytest.raises(PolicyError) as e:
        await policy(srv).generate([{"role": "user", "content": "x"}], SamplingParams())
    assert e.value.kind == "config" and "mode='chat'" in str(e.value)


async def test_429_retried_honouring_retry_after(srv: FakeOpenAIServer) -> None:
    srv.fail("rate_limit", times=2, retry_after_s=0.2)
    start = time.perf_counter()
    async with policy(srv) as p:
        gens = await p.generate("x", SamplingParams())
    assert len(gens) == 1 and srv.requests == 3
    assert time.perf_counter() - start >= 0.4  # two waits of Retry-After, not the 10 ms backoff
    assert [k for _, k in srv.faults_served] == ["rate_limit", "rate_limit"]


@pytest.mark.parametrize("kind", ["server_error", "drop", "garbage"])
async def test_transient_faults_retried(srv: FakeOpenAIServer, kind: str) -> None:
    srv.fail(kind, times=2)  # type: ignore[arg-type]
    async with policy(srv) as p:
        assert len(await p.generate("x", SamplingParams(n=2))) == 2
    assert srv.requests == 3


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("server_error", "http_status"), ("drop", "connection"), ("garbage", "bad_response")],
)
async def test_gives_up_after_budget(srv: FakeOpenAIServer, kind: str, expected: str) -> None:
    srv.fail(kind, times=100)  # type: ignore[arg-type]
    with pytest.raises(PolicyError) as e:
        async with policy(srv, retry=Retry(attempts=3, base_s=0.01)) as p:
            await p.generate("x", SamplingParams())
    assert e.value.kind == expected and e.value.attempts == 3 and srv.requests == 3
    assert srv.base_url in str(e.value) and "after 3 attempts" in str(e.value)


async def test_hang_is_timeout(srv: FakeOpenAIServer) -> None:
    srv.fail("hang", times=2)
    start = time.perf_counter()
    with pytest.raises(PolicyError) as e:
        async with policy(srv, timeout_s=0.3, retry=Retry(attempts=2, base_s=0.01)) as p:
            await p.generate("x", SamplingParams())
    assert e.value.kind == "timeout" and "timeout_s" in str(e.value)
    assert 0.6 <= time.perf_counter() - start < 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_not_retried(srv: FakeOpenAIServer, status: int) -> None:
    srv.fail("status", status=status, times=10)
    with pytest.raises(PolicyError) as e:
        await policy(srv).generate("x", SamplingParams())
    assert e.value.kind == "http_status" and e.value.status == status and srv.requests == 1


@pytest.mark.parametrize("status", [408, 409, 503])
async def test_retryable_statuses(srv: FakeOpenAIServer, status: int) -> None:
    srv.fail("status", status=status, times=1)
    assert len(await policy(srv).generate("x", SamplingParams())) == 1
    assert srv.requests == 2


async def test_unknown_model_names_the_fix(srv: FakeOpenAIServer) -> None:
    p = OpenAIPolicy(srv.base_url, "no-such-model", retry=FAST)
    with pytest.raises(PolicyError) as e:
        await p.generate("x", SamplingParams())
    assert e.value.status == 404 and "/models" in str(e.value)


async def test_unreachable_server_is_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        p = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", retry=Retry(attempts=2, base_s=0.01))
        with pytest.raises(PolicyError) as e:
            await p.generate("x", SamplingParams())
    assert e.value.kind == "connection" and "server is running" in str(e.value)


async def test_concurrency_limit_respected() -> None:
    with FakeOpenAIServer(latency_s=0.05) as srv:
        async with policy(srv, concurrency=4) as p:
            results = await asyncio.gather(*(p.generate("x", SamplingParams()) for _ in range(20)))
        assert len(results) == 20 and srv.requests == 20
        assert srv.max_in_flight == 4


async def test_bad_config_rejected() -> None:
    for kw in ({"mode": "edit"}, {"concurrency": 0}, {"timeout_s": 0}):
        with pytest.raises(PolicyError) as e:
            OpenAIPolicy("http://127.0.0.1:1/v1", "m", **kw)
        assert e.value.kind == "config"
    with pytest.raises(PolicyError, match="http"):
        OpenAIPolicy("127.0.0.1:8000", "m")


# ---- token-exact generation (generate_tokens) -----------------------------------------


async def test_generate_tokens_sends_ids_and_returns_sampled_ids(srv: FakeOpenAIServer) -> None:
    ids = list(map(ord, "def f(x):\n"))
    # mode="chat" on purpose: token prompts always go to the completions endpoint
    async with policy(srv, mode="chat") as p:
        gens = await p.generate_tokens(ids, SamplingParams(n=2, seed=5, max_tokens=64))
    assert len(gens) == 2
    for g in gens:
        assert g.token_ids == tuple(map(ord, g.text)) and g.text
        assert g.logprobs is not None and len(g.logprobs) == len(g.token_ids)
        assert all(lp <= 0 for lp in g.logprobs)
        assert g.prompt_token_ids == tuple(ids)
    body = srv.bodies[-1]
    assert body["prompt"] == ids and body["return_token_ids"] is True
    assert body["logprobs"] == 1 and "messages" not in body


async def test_generate_tokens_agrees_with_text_prompt(srv: FakeOpenAIServer) -> None:
    # Same prompt as ids and as text, same seed: the same sample (the fake is chr/ord).
    text = "def g(a, b):\n"
    params = SamplingParams(seed=11)
    async with policy(srv, token_ids=True, logprobs=True) as p:
        (by_text,) = await p.generate(text, params)
        (by_ids,) = await p.generate_tokens(list(map(ord, text)), params)
    assert by_ids.text == by_text.text and by_ids.token_ids == by_text.token_ids
    assert by_ids.logprobs == by_text.logprobs


async def test_generate_tokens_is_a_token_policy(srv: FakeOpenAIServer) -> None:
    from codegym.envs.tokens import TokenPolicy

    assert isinstance(policy(srv), TokenPolicy)


async def test_generate_tokens_rejects_bad_prompt_ids(srv: FakeOpenAIServer) -> None:
    for bad in ([], [1, -2], [1, "a"], [True]):
        with pytest.raises(PolicyError) as e:
            await policy(srv).generate_tokens(bad, SamplingParams())  # type: ignore[arg-type]
        assert e.value.kind == "config" and "token ids" in str(e.value)
    assert srv.requests == 0


async def test_generate_tokens_retries_faults(srv: FakeOpenAIServer) -> None:
    srv.fail("server_error", times=1)
    srv.fail("drop", times=1)
    async with policy(srv) as p:
        (g,) = await p.generate_tokens([100, 101, 102], SamplingParams())
    assert g.token_ids is not None and srv.requests == 3


async def test_generate_tokens_without_ids_from_server_is_bad_response() -> None:
    # A real OpenAI-shaped server that ignores return_token_ids (not vLLM): no guessing.
    from aiohttp import web

    seen: list[int] = []

    async def completions(request: web.Request) -> web.Response:
        seen.append(1)
        choice = {"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}
        return web.json_response({"choices": [choice], "usage": {"completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", retry=FAST) as p:
            with pytest.raises(PolicyError) as e:
                await p.generate_tokens([1, 2, 3], SamplingParams())
    finally:
        await runner.cleanup()
    assert e.value.kind == "bad_response" and "return_token_ids" in str(e.value)
    assert len(seen) == 1  # not retried: another attempt cannot add the ids


async def test_rollout_token_mode_uses_generate_tokens(srv: FakeOpenAIServer) -> None:
    """Two turns over HTTP: the second prompt is the first extended by ids, never re-encoded."""
    from codegym.envs import ByteTokenizer, Env, Resources, StepResult, Turn, register
    from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
    from codegym.tasks import IOCase, Task

    @register("test_two_turns_tokens")
    class TwoTurns(Env):
        async def reset(self, task: Task, seed: int) -> list[dict[str, object]]:
            self.turns = 0
            return [{"role": "user", "content": task.prompt}]

        async def step(self, turn: Turn) -> StepResult:
            self.turns += 1
            if self.turns == 1:
                return StepResult(observation=({"role": "user", "content": "again"},))
            return StepResult(done=True, reward=1.0, outcome="pass")

    tok = ByteTokenizer()
    async with policy(srv) as p:
        ex = LocalExecutor(
            EnvSpec("test_two_turns_tokens"), p, SamplingParams(), Resources(), tokenizer=tok
        )
        assert ex.policy is p  # the native path, not the TextTokenPolicy fallback
        engine = RolloutEngine(ex, RolloutConfig(group_size=2))
        task = Task(id="t", prompt="hello", io_cases=(IOCase("", ""),))
        groups = [g async for g in engine.run([task])]
    (traj, _) = groups[0].trajectories
    first, second = traj.turns
    assert traj.token_exact and first.completion_ids and second.completion_ids
    expected_second = [
        *first.prompt_ids,
        *first.completion_ids,
        *tok.render_observation([{"role": "user", "content": "again"}]),
    ]
    assert list(second.prompt_ids) == expected_second
    assert list(traj.token_ids) == [*expected_second, *second.completion_ids]
    assert sum(traj.loss_mask) == len(first.completion_ids) + len(second.completion_ids)
    assert any(b["prompt"] == expected_second for b in srv.bodies)


async def test_text_only_policy_gets_the_fallback_adapter(srv: FakeOpenAIServer) -> None:
    from codegym.envs import ByteTokenizer, Resources
    from codegym.envs.tokens import TextTokenPolicy
    from codegym.policies import Generation
    from codegym.rollout import EnvSpec, LocalExecutor

    class TextOnly:
        name = "text-only"

        async def generate(self, prompt: object, params: SamplingParams) -> list[Generation]:
            return []

    ex = LocalExecutor(
        EnvSpec("code"), TextOnly(), SamplingParams(), Resources(), tokenizer=ByteTokenizer()
    )
    assert isinstance(ex.policy, TextTokenPolicy)


async def test_a_hang_is_hedged_not_waited_out() -> None:
    """After the warm-up the policy knows the usual latency: a request that hangs gets a
    second copy, which answers; with no retries and a long timeout, only the hedge can
    make this call succeed."""
    with FakeOpenAIServer(latency_s=0.02) as srv:
        hedge = Hedge(warmup=8, factor=3.0, seeded=True)
        async with policy(srv, hedge=hedge, timeout_s=30, retry=Retry(attempts=1)) as p:
            for _ in range(10):
                await p.generate("x", SamplingParams(seed=5))
            assert p.hedges == 0  # healthy answers are never hedged
            srv.fail("hang", times=1)
            (g,) = await p.generate("x", SamplingParams(seed=5))
        assert g.text and p.hedges == 1 and p.hedge_wins == 1 and srv.requests == 12


async def test_no_hedge_waits_out_the_timeout() -> None:
    with FakeOpenAIServer(latency_s=0.02) as srv:
        async with policy(srv, hedge=None, timeout_s=0.5, retry=Retry(attempts=1)) as p:
            for _ in range(10):
                await p.generate("x", SamplingParams())
            srv.fail("hang", times=1)
            with pytest.raises(PolicyError) as e:
                await p.generate("x", SamplingParams())
        assert e.value.kind == "timeout" and p.hedges == 0 and srv.requests == 11


def test_the_hedge_delay_follows_recent_latencies() -> None:
    lat = Latencies(Hedge(warmup=4, factor=2.0, quantile=0.5, window=16, min_s=0.0))
    for s in (0.1, 0.1, 0.1):
        lat.add(s)
    assert lat.delay() is None  # not warmed up: "usual" is unknown
    lat.add(0.1)
    assert lat.delay() == pytest.approx(0.2)
    for _ in range(32):  # the window forgets the old latencies
        lat.add(1.0)
    assert lat.delay() == pytest.approx(2.0)
    with pytest.raises(ValueError):
        Hedge(factor=0.5)
