"""Paired comparison: verdict logic, methods, bad input, several suites, costs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codegym.evals.compare import CompareOptions, compare, compare_runs, compare_suites
from codegym.evals.power import plan, predicted_power, variance_components
from codegym.evals.runs import Run, RunError
from codegym.evals.sequential import SequentialMonitor, confidence_sequence

IDS = [f"t{i}" for i in range(100)]


def run(c: list[int] | np.ndarray, n: int = 1, ids: list[str] = IDS, **kw: object) -> Run:
    return Run.from_counts(ids, [n] * len(ids), c, **kw)  # type: ignore[arg-type]


def test_clear_regression_and_improvement_one_sample_uses_mcnemar() -> None:
    a = run([1] * 80 + [0] * 20)
    b = run([1] * 60 + [0] * 40)
    r = compare(a, b)
    assert r.method == "paired-t+mcnemar"
    assert r.verdict == "regressed" and r.delta == pytest.approx(-0.2)
    assert r.ci_high is not None and r.ci_high < 0 and r.p_value is not None and r.p_value < 1e-4
    assert compare(b, a).verdict == "improved"
    json.dumps(r.model_dump())  # the --json payload is plain JSON


def test_few_discordant_tasks_need_mcnemar_to_agree() -> None:
    # 5 of 100 tasks got worse, none better: the t-interval alone would say "regressed",
    # the exact McNemar test (p = 0.0625) does not.
    a = run([1] * 100)
    b = run([0] * 5 + [1] * 95)
    r = compare(a, b)
    assert r.ci_high is not None and r.ci_high < 0
    assert r.p_value == pytest.approx(0.0625)
    assert r.verdict == "inconclusive"


def test_margin_makes_small_losses_tolerated_and_non_inferior() -> None:
    rng = np.random.default_rng(1)
    a = run(rng.binomial(20, 0.6, 100), n=20)
    b = Run.from_counts(IDS, [20] * 100, np.maximum(a.c - 1, 0))  # lose ~1/20 on every task
    strict = compare(a, b)
    loose = compare(a, b, CompareOptions(margin=0.1))
    assert strict.verdict == "regressed"
    assert loose.verdict == "inconclusive" and loose.non_inferior
    assert loose.mde is not None and 0 < loose.mde < 0.05


def test_identical_runs_are_inconclusive_not_confident() -> None:
    a = run([1] * 50 + [0] * 50)
    r = compare(a, a)
    assert r.verdict == "inconclusive" and r.delta == 0 and r.p_value == 1.0
    assert r.correlation == pytest.approx(1.0)


def test_bootstrap_for_pass_at_k_is_seeded_and_sane() -> None:
    rng = np.random.default_rng(2)
    p = rng.beta(0.5, 0.5, 100)
    a = run(rng.binomial(10, p), n=10)
    b = run(rng.binomial(10, np.clip(p + 0.25, 0, 1)), n=10)
    r1 = compare(a, b, CompareOptions(k=5, seed=7))
    r2 = compare(a, b, CompareOptions(k=5, seed=7))
    assert r1.method == "bootstrap" and r1 == r2
    assert r1.verdict == "improved" and r1.ci_low is not None and r1.ci_low > 0
    assert r1.ci_low < (r1.delta or 0) < (r1.ci_high or 0)


def test_clusters_widen_the_interval() -> None:
    rng = np.random.default_rng(4)
    shift = np.repeat(rng.normal(0, 0.3, 10), 10)  # tasks in a cluster move together
    p = np.full(100, 0.5)
    a = run(rng.binomial(20, p), n=20)
    b = run(rng.binomial(20, np.clip(p + shift, 0, 1)), n=20)
    plain = compare(a, b)
    a_cl = run(a.c, n=20, clusters=[str(i // 10) for i in range(100)])
    clustered = compare(a_cl, b)
    assert clustered.n_clusters == 10 and plain.n_clusters == 100
    assert clustered.se is not None and plain.se is not None and clustered.se > 1.5 * plain.se
    assert any("cluster labels differ" in w for w in clustered.warnings)


# --- bad input -------------------------------------------------------------------------


def test_all_infra_run_is_refused_with_counts() -> None:
    a = run([1] * 100)
    dead = Run.from_rows([{"task_id": t, "outcome": "infra"} for t in IDS], name="dead")
    with pytest.raises(RunError, match=r"candidate dead has no scored samples.*infra=100"):
        compare(a, dead)


def test_small_overlap_is_refused_and_partial_overlap_warned() -> None:
    a = run([1] * 100)
    b = Run.from_counts([f"x{i}" for i in range(95)] + IDS[:5], [1] * 100, [1] * 100)
    with pytest.raises(RunError, match="share 5 usable task"):
        compare(a, b)
    c = Run.from_counts(IDS[:70], [1] * 70, [1] * 70)  # baseline has tasks the candidate lacks
    r = compare(a, c)
    assert r.n_tasks == 70 and r.dropped_tasks == {"baseline_only": 30, "candidate_only": 0}
    assert any("different tasks" in w for w in r.warnings)


def test_one_task_only_is_refused_or_inconclusive() -> None:
    a = Run.from_counts(["a"], [5], [5])
    b = Run.from_counts(["a"], [5], [0])
    with pytest.raises(RunError, match="need >= 10"):
        compare(a, b)
    r = compare(a, b, CompareOptions(min_tasks=1))
    assert r.verdict == "inconclusive" and r.ci_low is None
    assert any("no error bar" in w for w in r.warnings)


def test_mismatched_sample_counts_warn_and_k_too_large_drops_tasks() -> None:
    a = run([3] * 100, n=5)
    b = run([1] * 100, n=1)
    r = compare(a, b)
    assert any("sample counts differ" in w for w in r.warnings)
    with pytest.raises(RunError, match="share 0 usable"):
        compare(a, b, CompareOptions(k=2))


@pytest.mark.parametrize(
    "opts",
    [CompareOptions(alpha=0), CompareOptions(margin=-0.1), CompareOptions(margin=float("nan")),
     CompareOptions(k=0)],
)  # fmt: skip
def test_bad_options_raise(opts: CompareOptions) -> None:
    with pytest.raises(ValueError):
        compare(run([1] * 100), run([1] * 100), opts)


# --- several suites --------------------------------------------------------------------


def test_holm_across_suites_and_overall_verdict() -> None:
    rng = np.random.default_rng(5)
    p = rng.beta(0.5, 0.5, 100)
    base = {s: run(rng.binomial(10, p), n=10) for s in ("he", "mbpp", "lcb")}
    worse = run(rng.binomial(10, np.clip(p - 0.2, 0, 1)), n=10)
    same = {s: run(rng.binomial(10, p), n=10) for s in ("mbpp", "lcb")}
    overall, per = compare_suites(
        {"he": (base["he"], worse), **{s: (base[s], same[s]) for s in same}}
    )
    assert overall == "regressed" and per["he"].verdict == "regressed"
    raw = compare(base["mbpp"], same["mbpp"])
    assert per["mbpp"].p_improved is not None and raw.p_improved is not None
    assert per["mbpp"].p_improved >= raw.p_improved  # Holm never makes a p-value smaller


def test_compare_runs_splits_by_suite_label() -> None:
    rows_a, rows_b = [], []
    for i in range(60):
        suite = "he" if i < 30 else "mbpp"
        for side, passed in ((rows_a, True), (rows_b, i >= 30)):
            side.append(
                {
                    "task_id": f"t{i}",
                    "suite": suite,
                    "passed": passed,
                    "outcome": "pass" if passed else "fail",
                    "tokens_out": 100 if side is rows_a else 300,
                }
            )
    r = compare_runs(Run.from_rows(rows_a), Run.from_rows(rows_b))
    assert r.suites is not None and set(r.suites) == {"he", "mbpp"}
    assert r.suites["he"].verdict == "regressed" and r.verdict == "regressed"
    assert r.costs["tokens_out"].ratio == pytest.approx(3.0)


# --- planner and sequential units -------------------------------------------------------


def test_planner_components_and_monotone_rows() -> None:
    rng = np.random.default_rng(6)
    p = rng.beta(0.4, 0.4, 2000)
    base = run(rng.binomial(10, p), n=10, ids=[f"t{i}" for i in range(2000)])
    comp = variance_components(base)
    assert comp.between == pytest.approx(p.var(), rel=0.1)
    assert comp.within == pytest.approx(float(np.mean(p * (1 - p))), rel=0.05)
    pl = plan(base, 0.05)
    needs = [r.tasks_needed for r in pl.rows]
    assert needs == sorted(needs, reverse=True) and needs[0] > 2 * needs[-1]
    assert predicted_power(comp, 0.05, 10**4, 5) > 0.99
    with pytest.raises(RunError, match="one sample"):
        plan(run([1] * 50 + [0] * 50), 0.05)
    with pytest.raises(ValueError, match="delta"):
        plan(base, 0.0)


def test_monitor_matches_sequence_and_respects_burn_in() -> None:
    m = SequentialMonitor(min_n=20)
    first = m.update([1.0] * 5)
    assert first.verdict == "inconclusive" and not first.stop  # too early to call anything
    state = m.update([1.0] * 45)
    low, _high = confidence_sequence(np.ones(50))
    assert state.cs_low == pytest.approx(low[-1]) and state.verdict == "improved" and state.stop
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        m.update([2.0])
