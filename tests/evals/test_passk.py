"""pass@k estimator and summary, checked against simulation and exact enumeration."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest

from codegym.evals import pass_at_k, summarize, wilson_interval


def test_pass_at_k_matches_exact_enumeration() -> None:
    for n, c, k in [(5, 2, 1), (5, 2, 3), (6, 1, 2), (4, 4, 2), (7, 0, 3)]:
        pool = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(range(n), k))
        exact = sum(any(pool[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(exact)


def test_pass_at_k_needs_enough_samples() -> None:
    with pytest.raises(ValueError, match="at least 10"):
        pass_at_k(5, 1, 10)


def test_wilson_interval_covers_at_nominal_rate() -> None:
    rng = random.Random(0)
    p, n, hits, trials = 0.3, 50, 0, 2000
    for _ in range(trials):
        x = sum(rng.random() < p for _ in range(n))
        lo, hi = wilson_interval(x, n)
        hits += lo <= p <= hi
    assert 0.93 <= hits / trials <= 0.97


@dataclass
class _S:
    passed: bool
    outcome: str


def test_infra_never_enters_the_rate() -> None:
    ids = ["a", "a", "b", "b"]
    scores = [_S(True, "pass"), _S(False, "infra"), _S(False, "fail"), _S(False, "infra")]
    s = summarize(ids, scores, ks=(1,))
    assert s["excluded"] == 2 and s["scored"] == 2
    assert s["pass_at_k"]["1"]["estimate"] == pytest.approx(0.5)
