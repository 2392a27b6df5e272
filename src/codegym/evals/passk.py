"""pass@k (the unbiased estimator of Chen et al. 2021) and its summary.

Infra outcomes never enter a statistic: they are counted apart as ``excluded``, by kind;
samples marked ``flaky`` are excluded the same way.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any, Protocol

from codegym.tasks.outcomes import is_infra


class _Scored(Protocol):
    @property
    def passed(self) -> bool: ...
    @property
    def outcome(self) -> str: ...


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c correct) passes."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def wilson_interval(successes: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for a proportion."""
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(
    task_ids: Sequence[str],
    scores: Sequence[_Scored],
    ks: Sequence[int] = (1, 10, 100),
    *,
    intervals: bool = True,
) -> dict[str, Any]:
    """Per-task collapse, then pass@k with a CLT interval over tasks (``intervals=False``:
    the estimates only, for a caller that computes its own intervals)."""
    outcomes = Counter(s.outcome for s in scores)
    per_task: dict[str, list[bool]] = defaultdict(list)
    excluded: Counter[str] = Counter()
    for tid, s in zip(task_ids, scores, strict=True):
        if is_infra(s.outcome):
            excluded[s.outcome] += 1
            continue
        if getattr(s, "flaky", False):
            excluded["flaky"] += 1
            continue
        per_task[tid].append(s.passed)
    n_excluded = sum(excluded.values())
    result: dict[str, Any] = {
        "requested": len(scores),
        "scored": len(scores) - n_excluded,
        "excluded": n_excluded,
        "excluded_by_reason": dict(sorted(excluded.items())),
        "tasks": len(per_task),
        "outcomes": dict(sorted(outcomes.items())),
        "pass_at_k": {},
    }
    z = NormalDist().inv_cdf(0.975)
    for k in ks:
        values = [pass_at_k(len(v), sum(v), k) for v in per_task.values() if len(v) >= k]
        if not values or len(values) < len(per_task):
            continue
        m = sum(values) / len(values)
        entry: dict[str, Any] = {"estimate": m, "tasks": len(values)}
        if intervals:
            sd = math.sqrt(sum((x - m) ** 2 for x in values) / max(1, len(values) - 1))
            se = sd / math.sqrt(len(values))
            entry |= {"ci_low": max(0.0, m - z * se), "ci_high": min(1.0, m + z * se)}
        result["pass_at_k"][str(k)] = entry
    return result
