"""The GRPO objective: group-relative advantages and the clipped, masked policy loss.

Contract:

- ``group_advantages(rewards)``: ``(r - mean) / (std + eps)`` within one group, with the
  population std. A group whose rewards are all equal carries no learning signal: every
  advantage is exactly 0 and the trainer drops it (``informative`` is False). Only scored
  episodes are passed in: an excluded (infra) episode never enters a group's statistics.
- ``token_logprobs(model, ids, attn, temperature)``: the log-probability of each token given
  its prefix, aligned with ``ids`` (position 0 has no prefix and gets 0), under the same
  temperature the behaviour policy sampled with, so an unchanged model has ratio 1.
- ``grpo_loss``: per trained token (``mask == 1``)
  ``-min(ρA, clip(ρ, 1-ε, 1+ε_high)A) + β·KL``, with ``ρ = exp(logp - behaviour_logp)`` and
  the k3 estimator ``KL = exp(ref - logp) - (ref - logp) - 1`` against the reference
  model; aggregated per token over the batch (``token``) or per sequence then over
  sequences (``sequence``). Sequences with no trained token contribute nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["LossStats", "group_advantages", "grpo_loss", "token_logprobs"]


def group_advantages(rewards: Sequence[float], eps: float = 1e-4) -> list[float]:
    """Advantages of one group's scored episodes (all 0.0 when the rewards do not vary).

    Raises:
        ValueError: fewer than one reward, or a reward that is not finite.
    """
    if not rewards:
        raise ValueError("group_advantages: the group has no scored episode")
    if not all(math.isfinite(r) for r in rewards):
        raise ValueError(f"group_advantages: non-finite reward in {list(rewards)}")
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    if std < 1e-12:  # exact ties: no signal, and no division by eps blowing up noise
        return [0.0] * n
    return [(r - mean) / (std + eps) for r in rewards]


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``[B, T]`` log p(ids[:, t] | ids[:, :t]) at ``temperature``; column 0 is 0.

    Sequences are right-padded (``attention_mask`` 0 on the padding), so positions are
    the natural ones and no position ids are needed.
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)


@dataclass(frozen=True)
class LossStats:
    """Diagnostics of one loss evaluation (detached floats, over trained tokens)."""

    tokens: int
    """Trained tokens."""
    policy_loss: float
    kl: float
    """Mean k3 KL to the reference (0.0 without a reference)."""
    clip_frac: float
    """Fraction of tokens where the clipped term was the active one."""
    ratio_mean: float


def grpo_loss(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    agg: Literal["token", "sequence"] = "token",
) -> tuple[torch.Tensor, LossStats]:
    """The GRPO loss for ``[B, T]`` tensors and ``[B]`` advantages (see the module docstring).

    Raises:
        ValueError: shapes disagree, or ``kl_coef > 0`` without ``ref_logp``.
    """
    if logp.shape != behaviour_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"grpo_loss: logp {tuple(logp.shape)}, behaviour {tuple(behaviour_logp.shape)} "
            f"and mask {tuple(mask.shape)} must have the same [batch, tokens] shape"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"grpo_loss: advantages {tuple(advantages.shape)} must be [batch]")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("grpo_loss: kl_coef > 0 needs ref_logp (the reference's logprobs)")
    m = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    ratio = torch.exp(logp - behaviour_logp)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1.0
        if kl_coef > 0:
            per_token = per_token + kl_coef * kl
    n_tok = m.sum()
    if agg == "token":
        loss = (per_token * m).sum() / n_tok.clamp(min=1.0)
    else:
        per_seq_n = m.sum(-1)
        has = per_seq_n > 0
        seq = (per_token * m).sum(-1) / per_seq_n.clamp(min=1.0)
        loss = seq[has].sum() / has.sum().clamp(min=1)
    with torch.no_grad():
        denom = n_tok.clamp(min=1.0)
        stats = LossStats(
            tokens=int(n_tok.item()),
            policy_loss=float(((-torch.minimum(unclipped, clipped)) * m).sum() / denom),
            kl=float((kl * m).sum() / denom),
            clip_frac=float(((clipped < unclipped).to(m.dtype) * m).sum() / denom),
            ratio_mean=float((ratio * m).sum() / denom),
        )
    return loss, stats
