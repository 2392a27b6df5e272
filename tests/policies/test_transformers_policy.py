"""``TransformersPolicy`` on a tiny random GPT-2: seeds, batching, token ids, weights."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import torch

from codegym.envs.tokens import TokenPolicy
from codegym.policies import Policy, PolicyError, SamplingParams
from codegym.policies.transformers_policy import TransformersPolicy
from codegym.serving import build_random_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_random_model(tmp_path_factory.mktemp("m") / "tiny", n_embd=32)


@pytest_asyncio.fixture
async def policy(model_dir: Path) -> AsyncIterator[TransformersPolicy]:
    async with TransformersPolicy(model_dir, seed=0, batch_wait_s=0.05) as p:
        yield p


def rescore(p: TransformersPolicy, prompt: list[int], ids: list[int], temp: float) -> list[float]:
    with torch.inference_mode():
        logits = p.model(torch.tensor([prompt + ids])).logits[0].float() / temp
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


async def test_is_a_policy_and_a_token_policy(policy: TransformersPolicy) -> None:
    assert isinstance(policy, Policy) and isinstance(policy, TokenPolicy)
    gens = await policy.generate("def add(", SamplingParams(max_tokens=5, n=3, seed=1))
    assert len(gens) == 3
    for g in gens:
        assert g.policy_version == 0 and g.finish_reason == "length"
        assert g.token_ids is not None and len(g.token_ids) == 5 == g.tokens_out
        assert g.logprobs is not None and len(g.logprobs) == 5
        assert g.prompt_token_ids == tuple(policy.encode("def add("))


async def test_same_seed_same_samples_other_seed_differs(policy: TransformersPolicy) -> None:
    def ids(gens: list) -> list:  # type: ignore[type-arg]
        return [g.token_ids for g in gens]

    a = await policy.generate("x", SamplingParams(max_tokens=6, n=2, seed=9))
    b = await policy.generate("x", SamplingParams(max_tokens=6, n=2, seed=9))
    c = await policy.generate("x", SamplingParams(max_tokens=6, n=2, seed=10))
    assert ids(a) == ids(b) and ids(a) != ids(c)


async def test_concurrent_requests_share_batches_and_match_solo_runs(
    policy: TransformersPolicy,
) -> None:
    prompts = ["def", "for i in", "class Box:", "x"]
    solo = [
        await policy.generate(p, SamplingParams(max_tokens=5, seed=i))
        for i, p in enumerate(prompts)
    ]
    before = policy.batches_run
    together = await asyncio.gather(
        *(policy.generate(p, SamplingParams(max_tokens=5, seed=i)) for i, p in enumerate(prompts))
    )
    assert policy.batches_run - before < len(prompts)  # grouped into shared forward passes
    for s, t in zip(solo, together, strict=True):
        assert s[0].token_ids == t[0].token_ids
        assert s[0].logprobs == pytest.approx(t[0].logprobs, abs=1e-4)


async def test_generate_tokens_continues_the_exact_ids(policy: TransformersPolicy) -> None:
    # ids that text would not round-trip to: a merged token split into its pieces
    prompt = [*policy.encode("de"), *policy.encode("f")]
    gens = await policy.generate_tokens(prompt, SamplingParams(max_tokens=4, seed=2))
    assert gens[0].prompt_token_ids == tuple(prompt)
    assert gens[0].token_ids is not None and gens[0].logprobs is not None
    got = rescore(policy, prompt, list(gens[0].token_ids), 1.0)
    assert got == pytest.approx(gens[0].logprobs, abs=1e-4)


async def test_tempered_logprobs_mode(model_dir: Path) -> None:
    async with TransformersPolicy(model_dir, logprobs_mode="tempered") as p:
        g = (await p.generate_tokens([5, 6], SamplingParams(temperature=0.5, max_tokens=4)))[0]
        assert g.token_ids is not None and g.logprobs is not None
        assert rescore(p, [5, 6], list(g.token_ids), 0.5) == pytest.approx(g.logprobs, abs=1e-4)


async def test_load_weights_swaps_in_place_and_bumps_version(
    policy: TransformersPolicy, tmp_path: Path
) -> None:
    params = SamplingParams(max_tokens=3, temperature=0)
    base = (await policy.generate_tokens([7], params))[0]
    other = build_random_model(tmp_path / "other", n_embd=32, seed=5)
    assert policy.load_weights(other) == 1
    swapped = (await policy.generate_tokens([7], params))[0]
    assert swapped.policy_version == 1 and swapped.logprobs != base.logprobs
    state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    state["transformer.wte.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"transformer\.wte\.weight"):
        policy.load_weights(state)
    with pytest.raises(FileNotFoundError, match="missing"):
        policy.load_weights(tmp_path / "missing")
    assert policy.policy_version == 1  # a refused update changes nothing


async def test_bad_prompts_and_arguments_are_config_errors(
    policy: TransformersPolicy, model_dir: Path
) -> None:
    with pytest.raises(PolicyError, match="not ids of this model"):
        await policy.generate_tokens([10**9], SamplingParams(max_tokens=2))
    with pytest.raises(PolicyError, match="context"):
        await policy.generate_tokens([5] * 300, SamplingParams(max_tokens=2))
    with pytest.raises(PolicyError, match="batch_size"):
        TransformersPolicy(model_dir, batch_size=0)
    with pytest.raises(PolicyError, match=r"config\.json"):
        TransformersPolicy(model_dir.parent)


async def test_max_tokens_past_the_context_is_clipped(policy: TransformersPolicy) -> None:
    g = (await policy.generate_tokens([5] * 250, SamplingParams(max_tokens=50, seed=0)))[0]
    assert g.finish_reason == "length" and g.tokens_out == 6  # context 256
