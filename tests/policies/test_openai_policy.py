"""OpenAIPolicy against the real fake server: results, token detail, retries, give-ups."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from codegym.policies import OpenAIPolicy, PolicyError, Retry, SamplingParams
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
