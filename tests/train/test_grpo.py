"""The GRPO loss and advantages against a straightforward per-token reference."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from codegym.train.grpo import group_advantages, grpo_loss, token_logprobs


def reference_loss(
    logp: list[list[float]],
    old: list[list[float]],
    adv: list[float],
    mask: list[list[int]],
    ref: list[list[float]] | None,
    eps_low: float,
    eps_high: float,
    beta: float,
    agg: str,
) -> float:
    """Plain-Python GRPO: one token at a time, written from the formula."""
    per_seq: list[tuple[float, int]] = []
    for i in range(len(logp)):
        total, n = 0.0, 0
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            r = math.exp(logp[i][t] - old[i][t])
            rc = min(max(r, 1 - eps_low), 1 + eps_high)
            term = -min(r * adv[i], rc * adv[i])
            if ref is not None and beta > 0:
                d = ref[i][t] - logp[i][t]
                term += beta * (math.exp(d) - d - 1)
            total += term
            n += 1
        per_seq.append((total, n))
    if agg == "token":
        return sum(s for s, _ in per_seq) / max(1, sum(n for _, n in per_seq))
    means = [s / n for s, n in per_seq if n]
    return sum(means) / len(means)


def _case(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 9
    logp = -torch.rand(b, t, generator=g) * 3
    old = logp + (torch.rand(b, t, generator=g) - 0.5) * 1.2  # ratios well outside the clip
    ref = logp + (torch.rand(b, t, generator=g) - 0.5)
    adv = torch.randn(b, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.3).float()
    mask[0, :4] = 0  # a prompt prefix
    mask[3] = 0  # a sequence with nothing to train
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("agg", ["token", "sequence"])
@pytest.mark.parametrize(("beta", "eps_high"), [(0.0, None), (0.1, None), (0.05, 0.28)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_matches_per_token_reference(
    agg: str, beta: float, eps_high: float | None, seed: int
) -> None:
    logp, old, ref, adv, mask = _case(seed)
    loss, stats = grpo_loss(
        logp, old, adv, mask, ref_logp=ref, clip_eps=0.2, clip_eps_high=eps_high,
        kl_coef=beta, agg=agg,  # type: ignore[arg-type]
    )  # fmt: skip
    want = reference_loss(
        logp.tolist(), old.tolist(), adv.tolist(), mask.int().tolist(), ref.tolist(),
        0.2, eps_high if eps_high is not None else 0.2, beta, agg,
    )  # fmt: skip
    assert loss.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert stats.tokens == int(mask.sum())
    assert 0.0 < stats.clip_frac < 1.0  # the case really exercises clipping


def test_masked_tokens_get_no_gradient_and_clipped_ones_neither() -> None:
    logp, old, _, adv, mask = _case(0)
    x = logp.clone().requires_grad_(True)
    loss, _ = grpo_loss(x, old, adv, mask, clip_eps=0.2)
    loss.backward()
    assert x.grad is not None
    assert torch.all(x.grad[mask == 0] == 0)
    ratio = torch.exp(logp - old)
    a = adv.unsqueeze(-1).expand_as(ratio)
    # Clipped on the side the objective would push further: the min picks the constant.
    dead = ((a > 0) & (ratio > 1.2)) | ((a < 0) & (ratio < 0.8))
    assert torch.all(x.grad[dead & (mask == 1)] == 0)
    live = ~dead & (mask == 1)
    assert torch.all(x.grad[live] != 0)


def test_on_policy_gradient_is_advantage_weighted_logprob() -> None:
    # ratio == 1: d loss / d logp = -A / tokens for every trained token.
    logp, _, _, adv, mask = _case(1)
    x = logp.clone().requires_grad_(True)
    loss, stats = grpo_loss(x, logp.clone(), adv, mask)
    loss.backward()
    assert x.grad is not None and stats.ratio_mean == pytest.approx(1.0)
    expect = (-adv.unsqueeze(-1) / mask.sum()).expand_as(mask) * mask
    assert torch.allclose(x.grad, expect, atol=1e-7)


def test_kl_needs_a_reference_and_shapes_must_agree() -> None:
    logp, old, _, adv, mask = _case(0)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, adv, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="same"):
        grpo_loss(logp, old[:, :-1], adv, mask)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, old, adv[:-1], mask)


def test_advantages_are_group_normalised() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
    got = group_advantages(rewards, eps=1e-4)
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    assert got == pytest.approx([(r - mean) / (std + 1e-4) for r in rewards])
    assert sum(got) == pytest.approx(0.0, abs=1e-9)


def test_a_group_without_variance_contributes_nothing() -> None:
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.0] * 8) == [0.0] * 8
    with pytest.raises(ValueError, match="no scored"):
        group_advantages([])
    with pytest.raises(ValueError, match="non-finite"):
        group_advantages([1.0, float("nan")])


def test_token_logprobs_align_with_tokens() -> None:
    torch.manual_seed(0)
    vocab = 11

    class Bigram(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(vocab, vocab)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
            return type("Out", (), {"logits": self.table(input_ids)})()

    m = Bigram()
    ids = torch.tensor([[1, 4, 2, 7], [3, 3, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    got = token_logprobs(m, ids, attn, temperature=0.7)
    assert torch.all(got[:, 0] == 0)
    for i in range(2):
        for t in range(1, 4):
            row = torch.log_softmax(m.table.weight[ids[i, t - 1]] / 0.7, -1)
            assert got[i, t].item() == pytest.approx(row[ids[i, t]].item(), abs=1e-6)
