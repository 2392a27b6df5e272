"""The fake OpenAI server itself, spoken to with a plain HTTP client."""

from __future__ import annotations

import threading

import httpx
import pytest

from codegym.testing import FakeOpenAIServer


def test_models_and_completion_shape(srv: FakeOpenAIServer) -> None:
    with httpx.Client(base_url=srv.base_url) as c:
        assert c.get("/models").json()["data"][0]["id"] == srv.model
        body = {"model": srv.model, "prompt": "ab", "n": 2, "logprobs": 1, "max_tokens": 3}
        r = c.post("/completions", json=body).json()
    assert [ch["index"] for ch in r["choices"]] == [0, 1]
    assert all(len(ch["text"]) <= 3 for ch in r["choices"])
    assert r["usage"]["prompt_tokens"] == 2
    assert r["usage"]["completion_tokens"] == sum(len(ch["text"]) for ch in r["choices"])
    assert len(r["choices"][0]["logprobs"]["token_logprobs"]) == len(r["choices"][0]["text"])


def test_faults_at_given_request_numbers(srv: FakeOpenAIServer) -> None:
    srv.fail("rate_limit", at=[2], retry_after_s=7)
    srv.fail("status", at=3, status=418)
    body = {"model": srv.model, "prompt": "x"}
    with httpx.Client(base_url=srv.base_url) as c:
        codes = [c.post("/completions", json=body) for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 429, 418, 200]
    assert codes[1].headers["retry-after"] == "7"
    assert codes[2].json()["error"]["code"] == 418
    assert srv.faults_served == [(2, "rate_limit"), (3, "status")]


def test_drop_closes_mid_body_and_bad_requests_are_400(srv: FakeOpenAIServer) -> None:
    srv.fail("drop")
    with httpx.Client(base_url=srv.base_url) as c:
        # a drop reads as a truncated body or, when the reset wins the race, a reset
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            c.post("/completions", json={"model": srv.model, "prompt": "x"})
        assert c.post("/completions", json={"model": srv.model, "prompt": ["a"]}).status_code == 400
        assert c.post("/chat/completions", json={"model": srv.model}).status_code == 400
        assert c.post("/completions", content=b"{nope").status_code == 400


def test_stopped_server_releases_hung_requests() -> None:
    srv = FakeOpenAIServer()
    srv.start()
    srv.fail("hang")

    codes: list[int] = []

    def call() -> None:
        with httpx.Client(base_url=srv.base_url, timeout=10) as c:
            r = c.post("/completions", json={"model": "fake-model", "prompt": "x"})
            codes.append(r.status_code)

    t = threading.Thread(target=call)
    t.start()
    while srv.in_flight == 0:
        threading.Event().wait(0.01)
    srv.stop()
    t.join(5)
    assert codes == [503] and not t.is_alive()
