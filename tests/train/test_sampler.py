"""The trainer's sampler (``train.policy.local_policy``, a tempered ``TransformersPolicy``)
directly: the logprobs GRPO's ratio uses are the model's at the sampling temperature, a
seed fixes the samples whatever shares the batch, stops and limits end a sample as
documented, a row near the context's end beside a long one stops there (it once broke its
whole batch), and new weights bump the version that every generation carries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from codegym.policies import PolicyError, SamplingParams
from codegym.policies.transformers_policy import TransformersPolicy
from codegym.train.policy import PromptTokenizer, local_policy


@pytest.fixture(scope="module")
def policy(toy_model: Path) -> TransformersPolicy:
    return local_policy(toy_model, max_batch=8)


def _rescore(
    p: TransformersPolicy, prompt: list[int], ids: list[int], temperature: float
) -> list[float]:
    with torch.inference_mode():
        logits = p.model(torch.tensor([prompt + ids])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


async def test_logprobs_are_the_models_at_the_sampling_temperature(
    policy: TransformersPolicy,
) -> None:
    prompt = PromptTokenizer(policy.tokenizer).render([{"role": "user", "content": "def f(x):"}])
    for temperature in (1.0, 0.7):
        (g,) = await policy.generate_tokens(
            prompt, SamplingParams(temperature=temperature, max_tokens=12, seed=4)
        )
        assert g.token_ids and g.logprobs is not None and len(g.logprobs) == len(g.token_ids)
        want = _rescore(policy, prompt, list(g.token_ids), temperature)
        assert list(g.logprobs) == pytest.approx(want, abs=1e-4)
        assert g.prompt_token_ids == tuple(prompt) and g.policy_version == policy.current_version()


async def test_a_seed_fixes_the_samples_whatever_shares_the_batch(
    policy: TransformersPolicy,
) -> None:
    prompt = policy.tokenizer("def add(a, b):")["input_ids"]
    params = SamplingParams(temperature=1.0, max_tokens=10, seed=11, n=3)
    alone = await policy.generate_tokens(prompt, params)
    other = policy.tokenizer("class Stack:")["input_ids"]
    together, _ = await asyncio.gather(
        policy.generate_tokens(prompt, params),
        policy.generate_tokens(other, SamplingParams(max_tokens=10, seed=1, n=4)),
    )
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert len({g.token_ids for g in alone}) > 1  # the n rows are seeded apart


async def test_limits_stops_and_refusals(policy: TransformersPolicy) -> None:
    prompt = policy.tokenizer("def f():")["input_ids"]
    (cut,) = await policy.generate_tokens(prompt, SamplingParams(max_tokens=3, seed=2))
    assert cut.finish_reason in ("length", "stop") and len(cut.token_ids or ()) <= 3
    for seed in range(8):  # a seeded sample long enough to hold a stop string
        (free,) = await policy.generate_tokens(prompt, SamplingParams(max_tokens=16, seed=seed))
        if len(free.text) >= 4:
            break
    else:
        pytest.fail("no seed gave a sample of 4 characters")
    stop = free.text[2:4]
    (g,) = await policy.generate_tokens(
        prompt, SamplingParams(max_tokens=16, seed=seed, stop=(stop,))
    )
    assert g.finish_reason == "stop" and g.text == free.text[: free.text.find(stop)]
    with pytest.raises(PolicyError, match="not ids of this model"):
        await policy.generate_tokens([10**9], SamplingParams())


async def test_new_weights_bump_the_version_generations_carry(toy_model: Path) -> None:
    p = local_policy(toy_model)
    prompt = p.tokenizer("x =")["input_ids"]
    (before,) = await p.generate_tokens(prompt, SamplingParams(max_tokens=4, seed=0))
    state = {k: v + 0.01 for k, v in p.model.state_dict().items()}
    assert p.load_weights(state) == 1 == p.current_version()
    (after,) = await p.generate_tokens(prompt, SamplingParams(max_tokens=4, seed=0))
    assert (before.policy_version, after.policy_version) == (0, 1)
    assert after.logprobs != before.logprobs  # the new weights sample


async def test_the_context_bounds_prompts_and_samples(policy: TransformersPolicy) -> None:
    """A prompt that fills the context is refused alone (its batch-mates are sampled); one
    near the end of it stops there with "length"; a short row sharing the batch with a long
    one runs to its own limit."""
    ctx = policy.context_length
    params = SamplingParams(temperature=1.0, max_tokens=40, stop=(), seed=1)
    near_end = [5] * (ctx - 3)
    results = await asyncio.gather(
        policy.generate_tokens([5] * ctx, params),
        policy.generate_tokens(near_end, params),
        policy.generate_tokens([5, 6], params),
        return_exceptions=True,
    )
    too_long, (near,), (short,) = results  # type: ignore[misc]
    assert isinstance(too_long, PolicyError) and too_long.kind == "config"
    assert f"context is {ctx}" in str(too_long)
    assert len(near.token_ids) <= 3 and near.finish_reason in ("length", "stop")
    assert len(short.token_ids) == 40 or short.finish_reason == "stop"
