"""SamplingParams validation and digest; Retry backoff; the public surface."""

from __future__ import annotations

import random

import pytest

import codegym.policies as policies
from codegym.policies import PolicyError, Retry, SamplingParams
from codegym.policies.retry import is_retryable_status, parse_retry_after


def test_public_surface() -> None:
    assert sorted(policies.__all__) == [
        "Generation", "Hedge", "Message", "OpenAIPolicy", "Policy", "PolicyError", "Prompt",
        "ReplayPolicy", "Retry", "SamplingParams", "extract_code", "outcome_for_generation",
    ]  # fmt: skip


def test_digest_is_canonical_and_covers_every_field() -> None:
    base = SamplingParams()
    assert base.digest() == SamplingParams().digest() == SamplingParams(temperature=0.8).digest()
    assert SamplingParams(temperature=1).digest() == SamplingParams(temperature=1.0).digest()
    variants = [
        SamplingParams(temperature=0.7), SamplingParams(top_p=0.9), SamplingParams(max_tokens=100),
        SamplingParams(n=2), SamplingParams(seed=0), SamplingParams(stop=("\ndef",)),
    ]  # fmt: skip
    digests = {v.digest() for v in variants} | {base.digest()}
    assert len(digests) == len(variants) + 1


@pytest.mark.parametrize(
    "kw",
    [{"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"n": 0}, {"n": True},
     {"seed": 1.5}, {"stop": "\n"}, {"stop": ("",)}],
)  # fmt: skip
def test_bad_params_name_the_field(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        SamplingParams(**kw)  # type: ignore[arg-type]


def test_backoff_is_capped_jittered_and_yields_to_retry_after() -> None:
    r = Retry(attempts=5, base_s=0.5, max_s=4.0)
    rng = random.Random(0)
    for k in range(8):
        d = r.delay(k, rng=rng)
        assert 0 <= d <= min(4.0, 0.5 * 2**k)
    assert Retry(jitter=False, base_s=0.5, max_s=4).delay(1) == 1.0
    assert Retry(jitter=False, base_s=0.5, max_s=4).delay(10) == 4.0
    assert r.delay(0, retry_after_s=2.5) == 2.5 and r.delay(0, retry_after_s=60) == 4.0
    with pytest.raises(ValueError, match="attempts"):
        Retry(attempts=0)


def test_retry_after_parsing_and_status_classes() -> None:
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert all(is_retryable_status(s) for s in (408, 409, 429, 500, 502, 503))
    assert not any(is_retryable_status(s) for s in (400, 401, 403, 404, 422))


def test_policy_error_kinds_checked() -> None:
    assert PolicyError("timeout", "x").kind == "timeout"
    with pytest.raises(ValueError, match="unknown PolicyError kind"):
        PolicyError("oops", "x")  # type: ignore[arg-type]
