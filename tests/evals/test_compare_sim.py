"""Proof by simulation: simulated models with known per-task pass probabilities go through the
same functions the CLI uses (``compare``, ``plan``, ``confidence_sequence``).

Tolerances are three binomial standard errors of the simulated rate unless stated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from codegym.evals.compare import CompareOptions, compare
from codegym.evals.power import plan, predicted_power
from codegym.evals.runs import Run
from codegym.evals.sequential import confidence_sequence, simulate_savings
from codegym.evals.simulate import draw_counts, runs_from_counts, shift_rates, true_rates

T = 164  # HumanEval's size
ALPHA = 0.05


def slack(p: float, n: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / n)


def verdict_rates(
    pairs: list[tuple[Run, Run]], opts: CompareOptions | None = None
) -> dict[str, float]:
    verdicts = [compare(a, b, opts).verdict for a, b in pairs]
    return {v: verdicts.count(v) / len(verdicts) for v in ("improved", "regressed", "inconclusive")}


def test_aa_false_positive_rate_unclustered_samples_1_to_20() -> None:
    rng = np.random.default_rng(10)
    pairs: list[tuple[Run, Run]] = []
    for s in (1, 2, 5, 10, 20):  # 5 x 240 = 1,200 comparisons
        p = true_rates(T, rng)
        a = runs_from_counts(draw_counts(p, s, 240, rng), s)
        b = runs_from_counts(draw_counts(p, s, 240, rng), s)
        pairs += list(zip(a, b, strict=True))
    rates = verdict_rates(pairs)
    n = len(pairs)
    assert rates["regressed"] <= ALPHA / 2 + slack(ALPHA / 2, n)
    assert rates["regressed"] + rates["improved"] <= ALPHA + slack(ALPHA, n)
    assert rates["regressed"] > 0.005  # not trivially conservative: the test can fire


def _clustered_pairs(
    rng: np.random.Generator, reps: int, s: int
) -> tuple[list[tuple[Run, Run]], list[str]]:
    """Superpopulation A/A with clusters: each replicate draws fresh tasks and a per-cluster
    logit shift of mean zero, so the candidate equals the baseline on average over suites but
    tasks in one cluster move together: only a clustered SE is honest here."""
    clusters = [str(i // 4) for i in range(T)]  # 41 clusters of 4 tasks
    pairs = []
    for _ in range(reps):
        p = true_rates(T, rng)
        u = np.repeat(rng.normal(0, 1.0, T // 4), 4)
        q = special.expit(special.logit(np.clip(p, 1e-6, 1 - 1e-6)) + u)
        ca, cb = draw_counts(p, s, 1, rng), draw_counts(q, s, 1, rng)
        pairs.append((runs_from_counts(ca, s, clusters)[0], runs_from_counts(cb, s, clusters)[0]))
    return pairs, clusters


def test_aa_false_positive_rate_with_clustering() -> None:
    rng = np.random.default_rng(11)
    pairs: list[tuple[Run, Run]] = []
    for s in (1, 5, 20):
        pairs += _clustered_pairs(rng, 350, s)[0]
    clustered = verdict_rates(pairs)
    n = len(pairs)
    assert clustered["regressed"] <= ALPHA / 2 + slack(ALPHA / 2, n)
    assert clustered["regressed"] + clustered["improved"] <= ALPHA + slack(ALPHA, n)
    # The same data with the cluster labels dropped over-rejects: clustering is doing work.
    plain = verdict_rates([(Run.from_counts(a.task_ids, a.n, a.c), b) for a, b in pairs])
    assert plain["regressed"] + plain["improved"] > 1.5 * ALPHA


@pytest.mark.parametrize(("s", "delta"), [(1, 0.08), (5, 0.04), (20, -0.03)])
def test_ab_detection_rate_matches_planner(s: int, delta: float) -> None:
    rng = np.random.default_rng(12)
    p = true_rates(T, rng)
    q = shift_rates(p, delta)
    reps = 1000
    a = runs_from_counts(draw_counts(p, s, reps, rng), s)
    b = runs_from_counts(draw_counts(q, s, reps, rng), s)
    want = "improved" if delta > 0 else "regressed"
    detected = verdict_rates(list(zip(a, b, strict=True)))[want]
    # The planner sees one baseline run (10 samples per task, to split the variance) and the
    # true correlation of this proportional-shift model, 1.
    base = runs_from_counts(draw_counts(p, 10, 1, rng), 10)[0]
    pl = plan(base, delta, alpha=ALPHA, correlation=1.0)
    predicted = predicted_power(pl.components, delta, T, s, ALPHA, 1.0)
    # Stated tolerance: 0.08 = simulation error (~0.04) + the planner's own estimation error.
    assert abs(detected - predicted) <= 0.08, (detected, predicted)


def test_ci_coverage_is_nominal() -> None:
    rng = np.random.default_rng(13)
    hits, total = 0, 0
    for s, delta in ((1, 0.05), (5, -0.05), (20, 0.02)):
        for _ in range(400):
            p = true_rates(T, rng)  # a fresh suite each time: the CI targets the mean over tasks
            q = shift_rates(p, delta)
            a = runs_from_counts(draw_counts(p, s, 1, rng), s)[0]
            b = runs_from_counts(draw_counts(q, s, 1, rng), s)[0]
            r = compare(a, b)
            assert r.ci_low is not None and r.ci_high is not None
            hits += r.ci_low <= delta <= r.ci_high
            total += 1
    cover = hits / total
    assert abs(cover - (1 - ALPHA)) <= slack(1 - ALPHA, total), cover


def test_sequential_keeps_alpha_under_continuous_monitoring() -> None:
    rng = np.random.default_rng(14)
    reps = 2000
    for s in (1, 5, 20):
        p = true_rates(T, rng)
        d = (draw_counts(p, s, reps, rng) - draw_counts(p, s, reps, rng)) / s
        low, high = confidence_sequence(d, ALPHA, t_star=T)
        ever = ((low[:, 19:] > 0) | (high[:, 19:] < 0)).any(axis=1).mean()  # look after every task
        assert ever <= ALPHA + slack(ALPHA, reps), (s, ever)
        # Peeking at a fixed-n t-interval after every task does inflate alpha: the contrast.
        t = np.arange(1, T + 1)
        mean = np.cumsum(d, 1) / t
        sd = np.sqrt(np.maximum(np.cumsum(d * d, 1) / t - mean**2, 0) * t / np.maximum(t - 1, 1))
        naive = (np.abs(mean[:, 19:]) > 1.96 * sd[:, 19:] / np.sqrt(t[19:])).any(axis=1).mean()
        assert naive > 2 * ALPHA


def test_sequential_saves_tasks_on_clear_changes() -> None:
    p = true_rates(T, np.random.default_rng(15))
    big = simulate_savings(p, 0.1, samples=5, reps=1000, seed=1)
    assert big.seq_wrong == 0 and big.seq_power > 0.95
    assert big.saving is not None and big.saving > 0.3  # measured ~0.5: stops at ~60 of 164
    null = simulate_savings(p, 0.0, samples=5, reps=1000, seed=2)
    assert null.seq_wrong <= ALPHA / 2 + slack(ALPHA / 2, 1000)
