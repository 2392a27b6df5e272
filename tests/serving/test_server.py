"""The model server through the official ``openai`` client and codegym's ``OpenAIPolicy``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from codegym.policies import OpenAIPolicy, SamplingParams
from codegym.serving import ModelServer, build_random_model


def client(srv: ModelServer, key: str = "EMPTY") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key=key, max_retries=0, timeout=120)


def raw_completion(srv: ModelServer, **kw: Any) -> dict[str, Any]:
    """The raw JSON body, so vLLM's extra fields are checked as sent on the wire."""
    r = client(srv).completions.with_raw_response.create(model=srv.model_name, **kw)
    body: dict[str, Any] = json.loads(r.content)
    return body


def rescore(srv: ModelServer, prompt: list[int], ids: list[int]) -> list[float]:
    """Logprobs of ``ids`` after ``prompt`` from one plain forward pass (temperature 1)."""
    with torch.inference_mode():
        logits = srv.policy.model(torch.tensor([prompt + ids])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def test_models_lists_the_served_model_and_version(server: ModelServer) -> None:
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].model_extra is not None
    assert models.data[0].model_extra["policy_version"] == 0


def test_completion_token_ids_and_logprobs_match_a_rescore(server: ModelServer) -> None:
    body = raw_completion(
        server,
        prompt="def add(a, b):",
        max_tokens=8,
        temperature=1.0,
        seed=3,
        logprobs=2,
        # ids as keys: two ids that decode to the same text would share one key otherwise
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    choice = body["choices"][0]
    prompt_ids = server.policy.encode("def add(a, b):")
    assert choice["prompt_token_ids"] == prompt_ids
    ids = choice["token_ids"]
    lps = choice["logprobs"]["token_logprobs"]
    assert len(ids) == len(lps) == body["usage"]["completion_tokens"]
    assert choice["text"] == server.policy.decode(ids)
    assert rescore(server, prompt_ids, ids) == pytest.approx(lps, abs=1e-4)
    assert all(len(alts) >= 2 for alts in choice["logprobs"]["top_logprobs"])
    assert body["policy_version"] == 0 and choice["policy_version"] == 0


def test_token_id_prompt_continues_exactly(server: ModelServer) -> None:
    ids = server.policy.encode("for i in range(10):")
    as_text = raw_completion(
        server,
        prompt="for i in range(10):",
        max_tokens=6,
        seed=5,
        extra_body={"return_token_ids": True},
    )
    as_ids = raw_completion(
        server, prompt=ids, max_tokens=6, seed=5, extra_body={"return_token_ids": True}
    )
    assert as_ids["choices"][0]["prompt_token_ids"] == ids
    assert as_ids["choices"][0]["token_ids"] == as_text["choices"][0]["token_ids"]


def test_chat_n_samples_are_seed_reproducible(server: ModelServer) -> None:
    messages: list[Any] = [{"role": "user", "content": "write add"}]

    def ask(seed: int) -> list[str]:
        r = client(server).chat.completions.create(
            model="tiny", messages=messages, n=3, seed=seed, max_tokens=8
        )
        assert len(r.choices) == 3
        return [c.message.content or "" for c in r.choices]

    first = ask(11)
    assert ask(11) == first
    assert ask(12) != first
    assert len(set(first)) > 1  # the n samples differ from each other


def test_chat_logprobs_and_prompt_ids(server: ModelServer) -> None:
    r = client(server).chat.completions.with_raw_response.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    body = json.loads(r.content)
    assert r.headers["x-policy-version"] == "0"
    expected_prompt = server.policy.encode("<|user|>\nhi\n<|assistant|>\n")
    assert body["prompt_token_ids"] == expected_prompt
    choice = body["choices"][0]
    content = choice["logprobs"]["content"]
    assert [e["token"] for e in content] == [f"token_id:{i}" for i in choice["token_ids"]]
    assert all(len(e["top_logprobs"]) == 3 for e in content)
    got = [e["logprob"] for e in content]
    assert rescore(server, expected_prompt, choice["token_ids"]) == pytest.approx(got, abs=1e-4)


def test_max_tokens_finishes_with_length(server: ModelServer) -> None:
    body = raw_completion(
        server, prompt="x", max_tokens=4, seed=1, extra_body={"return_token_ids": True}
    )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 4


def test_stop_string_cuts_the_text(server: ModelServer) -> None:
    full = raw_completion(server, prompt="def", max_tokens=12, seed=21)["choices"][0]["text"]
    assert len(full) >= 6, full
    stop = full[3:5]  # a string the seeded sample is known to produce
    body = raw_completion(
        server,
        prompt="def",
        max_tokens=12,
        seed=21,
        stop=[stop],
        extra_body={"return_token_ids": True},
    )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == full[: full.find(stop)]
    # the token that completed the stop string is kept, as vLLM does
    assert stop in server.policy.decode(choice["token_ids"])


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("temperature", {"temperature": -1}),
        ("top_p", {"top_p": 0}),
        ("max_tokens", {"max_tokens": 0}),
        ("n", {"n": 0}),
        ("prompt", {"prompt": [999999]}),
        ("presence_penalty", {"presence_penalty": 0.5}),
        ("frequency_penalty", {"frequency_penalty": 1.0}),
        ("response_format", {"extra_body": {"response_format": {"type": "json_object"}}}),
        ("logit_bias", {"logit_bias": {"1": 5}}),
        ("stream", {"stream": True, "logprobs": 1}),
        ("top_k", {"extra_body": {"top_k": 5}}),
        ("min_p", {"extra_body": {"min_p": 0.1}}),
        ("repetition_penalty", {"extra_body": {"repetition_penalty": 1.2}}),
        ("best_of", {"best_of": 2}),
        ("suffix", {"suffix": "end"}),
        ("ignore_eos", {"extra_body": {"ignore_eos": True}}),
        ("top_kk", {"extra_body": {"top_kk": 1}}),  # a typo is refused, not ignored
        ("guided_json", {"extra_body": {"guided_json": {"type": "object"}}}),
        ("stream_options", {"stream": True, "stream_options": {"continuous_usage_stats": True}}),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    server: ModelServer, field: str, kw: dict[str, Any]
) -> None:
    body = {"prompt": "x", "max_tokens": 2, **kw}
    with pytest.raises(openai.BadRequestError) as err:
        client(server).completions.create(model="tiny", **body)
    assert field in err.value.message
    if field not in ("temperature", "top_p", "max_tokens", "n", "prompt"):  # bad values
        assert err.value.code == "unsupported", err.value.body
        assert isinstance(err.value.body, dict) and err.value.body["param"] == field


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("top_k", {"extra_body": {"top_k": 1}}),
        ("min_p", {"extra_body": {"min_p": 0.5}}),
        ("repetition_penalty", {"extra_body": {"repetition_penalty": 0.9}}),
        (
            "parallel_tool_calls",
            {
                "parallel_tool_calls": False,
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "run", "parameters": {"type": "object"}},
                    }
                ],
            },
        ),
        ("top_logprobs", {"top_logprobs": 2}),
        ("reasoning_effort", {"reasoning_effort": "high"}),
        ("echo", {"extra_body": {"echo": True}}),
    ],
)
def test_chat_refuses_what_it_does_not_honour_by_name(
    server: ModelServer, field: str, kw: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(server).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2, **kw
        )
    assert field in err.value.message and err.value.code == "unsupported"


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("text", {"text": {"format": {"type": "json_object"}}}),
        ("text", {"text": {"verbosity": "low"}}),
        ("parallel_tool_calls", {"parallel_tool_calls": False}),
        ("truncation", {"truncation": "auto"}),
        ("include", {"include": ["message.output_text.logprobs"]}),
        ("top_k", {"extra_body": {"top_k": 3}}),
        ("max_tool_calls", {"max_tool_calls": 1}),
        ("top_logprobs", {"top_logprobs": 2}),
        ("n", {"extra_body": {"n": 2}}),  # a chat field, but one Responses answer only
        ("previous_response_id", {"previous_response_id": "r1"}),
    ],
)
def test_the_responses_api_refuses_what_it_does_not_honour_by_name(
    server: ModelServer, field: str, kw: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(server).responses.create(model="tiny", input="x", max_output_tokens=2, **kw)
    assert field in err.value.message and err.value.code == "unsupported", err.value.body


def test_unknown_model_is_a_404_naming_the_served_one(server: ModelServer) -> None:
    with pytest.raises(openai.NotFoundError, match="tiny"):
        client(server).completions.create(model="gpt-9", prompt="x", max_tokens=2)


async def test_openai_policy_gets_token_ids_from_the_server(server: ModelServer) -> None:
    params = SamplingParams(max_tokens=6, n=2, seed=4, temperature=1.0)
    for mode in ("completions", "chat"):
        async with OpenAIPolicy(
            server.base_url, "tiny", mode=mode, token_ids=True, logprobs=True
        ) as policy:
            gens = await policy.generate("def add(", params)
        assert len(gens) == 2
        for g in gens:
            assert g.token_ids is not None and g.prompt_token_ids is not None
            assert g.logprobs is not None and len(g.logprobs) == len(g.token_ids)
            assert g.text == server.policy.decode(g.token_ids)


def test_weight_update_bumps_version_and_changes_outputs(model_dir: Path, tmp_path: Path) -> None:
    other = build_random_model(tmp_path / "other", n_embd=32, n_positions=1024, seed=1)
    with ModelServer(model_dir, model_name="tiny", weights_token="s3cret") as srv:
        http = httpx.Client(base_url=srv.base_url, timeout=60)
        # greedy tokens of random models all echo the prompt; their logprobs tell them apart
        ask = {"model": "tiny", "prompt": "def", "max_tokens": 8, "temperature": 0, "logprobs": 0}

        def lps(body: dict[str, Any]) -> list[float]:
            return list(body["choices"][0]["logprobs"]["token_logprobs"])

        before = lps(http.post("/completions", json=ask).json())

        assert http.post("/weights", json={"path": str(other)}).status_code == 401
        auth = {"authorization": "Bearer s3cret"}
        r = http.post("/weights", json={"path": str(other)}, headers=auth)
        assert r.status_code == 200 and r.json()["policy_version"] == 1
        after = http.post("/completions", json=ask).json()
        assert after["policy_version"] == 1
        assert lps(after) != pytest.approx(before, abs=1e-3)
        assert http.get("/models").json()["data"][0]["policy_version"] == 1

        bad = http.post("/weights", json={"path": str(tmp_path / "nope")}, headers=auth)
        assert bad.status_code == 400 and "nope" in bad.json()["error"]["message"]
        r = http.post("/reload", json={}, headers=auth)  # back to the served folder
        assert r.json()["policy_version"] == 2
        again = http.post("/completions", json=ask).json()
        assert lps(again) == before and again["policy_version"] == 2


def test_the_tokenizers_chat_template_is_used(tmp_path: Path) -> None:
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}[assistant]"
    path = build_random_model(tmp_path / "chat", n_embd=32, chat_template=template)
    with ModelServer(path) as srv:
        r = client(srv).chat.completions.with_raw_response.create(
            model=srv.model_name,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            extra_body={"return_token_ids": True},
        )
        body = json.loads(r.content)
        assert body["prompt_token_ids"] == srv.policy.encode("[user]hi[assistant]")


def test_defaults_that_change_nothing_are_accepted(server: ModelServer) -> None:
    r = client(server).completions.create(
        model="tiny", prompt="x", max_tokens=2, presence_penalty=0, frequency_penalty=0,
        extra_body={"response_format": {"type": "text"}, "top_k": -1, "min_p": 0,
                    "repetition_penalty": 1, "logit_bias": None, "store": False},
        user="me", best_of=1,
    )  # fmt: skip
    assert r.choices[0].finish_reason in ("stop", "length")
    tools: Any = [
        {"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}
    ]
    chat = client(server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2, tools=tools,
        parallel_tool_calls=True, store=False, metadata={"run": "1"}, user="me",
        extra_body={"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0},
    )  # fmt: skip
    assert chat.choices[0].finish_reason in ("stop", "length", "tool_calls")
    rtools: Any = [{"type": "function", "name": "run", "parameters": {"type": "object"},
                    "strict": True}]  # fmt: skip
    resp = client(server).responses.create(
        model="tiny", input="x", max_output_tokens=2, tools=rtools, store=False,
        include=["reasoning.encrypted_content"], parallel_tool_calls=True,
        truncation="disabled", metadata={"a": "b"}, text={"format": {"type": "text"}},
        extra_body={"top_k": -1, "seed": 3},
    )  # fmt: skip
    assert resp.status in ("completed", "incomplete")


def test_the_responses_api_honours_seed(server: ModelServer) -> None:
    def ask(seed: int) -> str:
        return (
            client(server)
            .responses.create(
                model="tiny", input="def", max_output_tokens=8, extra_body={"seed": seed}
            )
            .output_text
        )

    assert ask(4) == ask(4)
    assert len({ask(s) for s in range(4, 8)}) > 1


def test_a_request_past_the_context_is_context_length_exceeded(server: ModelServer) -> None:
    ctx = server.policy.context_length
    with pytest.raises(openai.BadRequestError) as err:
        client(server).completions.create(model="tiny", prompt="x", max_tokens=ctx)
    assert err.value.code == "context_length_exceeded" and str(ctx) in err.value.message
    long = list(range(1, ctx + 5))
    with pytest.raises(openai.BadRequestError) as err:
        client(server).completions.create(model="tiny", prompt=long, max_tokens=1)
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as nf:
        client(server).completions.create(model="gpt-9", prompt="x", max_tokens=1)
    assert nf.value.code == "model_not_found"


def test_a_streamed_chat_is_the_same_answer(server: ModelServer) -> None:
    msgs = [{"role": "user", "content": "def add(a, b):"}]
    whole = client(server).chat.completions.create(
        model="tiny",
        messages=msgs,
        max_tokens=12,
        seed=5,  # type: ignore[arg-type]
    )
    stream = client(server).chat.completions.create(
        model="tiny", messages=msgs, max_tokens=12, seed=5, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == [whole.choices[0].finish_reason]
    assert len([c for c in chunks if c.choices]) >= 3  # it came in pieces, not at once
    assert chunks[-1].usage is not None and chunks[-1].usage == whole.usage


def test_a_streamed_completion_holds_back_what_a_stop_string_cuts(server: ModelServer) -> None:
    full = raw_completion(server, prompt="def", max_tokens=12, seed=21)["choices"][0]["text"]
    stop = full[3:5]
    whole = client(server).completions.create(
        model="tiny", prompt="def", max_tokens=12, seed=21, stop=[stop], n=2
    )
    pieces: dict[int, str] = {0: "", 1: ""}
    for c in client(server).completions.create(
        model="tiny", prompt="def", max_tokens=12, seed=21, stop=[stop], n=2, stream=True
    ):
        for ch in c.choices:
            pieces[ch.index] += ch.text
            assert stop not in pieces[ch.index]
    assert [pieces[0], pieces[1]] == [ch.text for ch in whole.choices]


def test_echo_scores_the_prompt_for_likelihood_evals(server: ModelServer) -> None:
    ids = server.policy.encode("def add(a, b): return a + b")
    body = raw_completion(server, prompt=ids, max_tokens=0, echo=True, logprobs=1)
    lp = body["choices"][0]["logprobs"]
    assert body["choices"][0]["text"] == server.policy.decode(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["token_logprobs"][1:] == pytest.approx(rescore(server, ids[:1], ids[1:]), abs=1e-4)
    for top, got in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:], strict=True):
        assert max(top.values()) >= got - 1e-6  # the greedy check lm-eval makes
    # echo with one sampled token after the prompt, as lm-eval's local-completions sends
    one = raw_completion(server, prompt=[ids, ids[:5]], max_tokens=1, echo=True, logprobs=1)
    assert [len(c["logprobs"]["tokens"]) for c in one["choices"]] == [len(ids) + 1, 6]
    with pytest.raises(openai.BadRequestError, match="echo"):
        client(server).completions.create(model="tiny", prompt="x", max_tokens=0)


def test_tools_are_described_and_calls_parsed(server: ModelServer) -> None:
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    msgs = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]  # fmt: skip
    r = client(server).chat.completions.create(
        model="tiny",
        messages=msgs,
        tools=tools,
        max_tokens=4,  # type: ignore[arg-type]
    )
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client(server).chat.completions.create(
            model="tiny",
            messages=msgs[:1],
            tools=tools,
            tool_choice="required",
            max_tokens=4,  # type: ignore[arg-type]
        )


def test_the_responses_api(server: ModelServer) -> None:
    tools = [{"type": "function", "name": "run", "parameters": {"type": "object"}}]
    r = client(server).responses.create(
        model="tiny", input="def add(a, b):", instructions="Write Python.",
        max_output_tokens=6, tools=tools,  # type: ignore[arg-type]
    )  # fmt: skip
    assert r.status in ("completed", "incomplete") and isinstance(r.output_text, str)
    assert r.usage is not None and r.usage.output_tokens <= 6
    events = list(
        client(server).responses.create(model="tiny", input="x", max_output_tokens=5, stream=True)
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client(server).responses.create(model="tiny", input="x", previous_response_id="r1")
