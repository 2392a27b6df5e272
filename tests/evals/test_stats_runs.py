"""Loading runs and one-run error bars: per-task collapse, exclusions, clustered SEs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import statsmodels.api as sm

from codegym.evals.runs import Run, RunError, load_run
from codegym.evals.stats import estimate, mean_se, proportion_interval, task_intervals


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(tid: str, passed: bool, **kw: Any) -> dict[str, Any]:
    return {"task_id": tid, "completion": "", "passed": passed,
            "outcome": "pass" if passed else "fail", **kw}  # fmt: skip


def test_collapse_excludes_infra_and_flaky_and_averages_costs(tmp_path: Path) -> None:
    rows = [
        row("a", True, sample_index=0, tokens_in=10, cpu_s=0.5),
        row("a", False, sample_index=1, tokens_in=20, cpu_s=float("nan")),
        row("a", True, sample_index=2, flaky=True),
        {"task_id": "b", "outcome": "infra", "passed": False},
        {"task_id": "b", "outcome": "policy_error", "passed": None},
        row("c", True, cluster="g1"),
    ]
    (tmp_path / "run").mkdir()
    write(tmp_path / "run" / "results.jsonl", rows)
    run = load_run(tmp_path / "run")
    assert run.task_ids == ("a", "c")  # b had only infra samples: not a task of the statistic
    assert run.n.tolist() == [2, 1] and run.c.tolist() == [1, 1]
    assert dict(run.excluded) == {"infra": 1, "policy_error": 1}
    assert run.flaky == (("a", 2),)
    assert run.clusters == ("a", "g1") and not run.clustered
    assert run.costs == {"tokens_in": 15.0, "cpu_s": 0.5}  # the NaN cpu_s is ignored
    assert run.requested == 6


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("{not json\n", ":1: not valid JSON"),
        ('{"task_id": "a", "outcome": "pass", "passed": NaN}\n', "'passed' must be true or false"),
        ('{"task_id": "a", "outcome": "weird", "passed": true}\n', "unknown outcome 'weird'"),
        ('{"task_id": "a", "outcome": "fail", "passed": true}\n', "contradicts"),
        ('{"outcome": "pass", "passed": true}\n', "task_id"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(content)
    with pytest.raises(RunError, match=message):
        load_run(p)


def test_missing_path_and_folder_without_results(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no such file"):
        load_run(tmp_path / "nope.jsonl")
    with pytest.raises(RunError, match=r"without results\.jsonl"):
        load_run(tmp_path)


def test_pass_at_k_per_task_is_unbiased_and_checks_n() -> None:
    run = Run.from_counts(["a", "b"], [5, 5], [0, 2])
    assert run.pass_at_k(2).tolist() == pytest.approx([0.0, 1 - 3 / 5 * 2 / 4])
    with pytest.raises(RunError, match="pass@6 needs >= 6"):
        run.pass_at_k(6)


@pytest.mark.parametrize("clustered", [False, True])
def test_clustered_se_matches_statsmodels(clustered: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.random(60)
    groups = np.repeat(np.arange(15), 4)
    fit = sm.OLS(x, np.ones_like(x)).fit(
        **({"cov_type": "cluster", "cov_kwds": {"groups": groups}} if clustered else {})
    )
    ms = mean_se(x, [str(g) for g in groups] if clustered else None)
    assert ms.mean == pytest.approx(fit.params[0])
    assert ms.se == pytest.approx(fit.bse[0], rel=1e-9)
    assert ms.df == (14 if clustered else 59)


def test_mean_se_rejects_nan_and_one_cluster_has_no_se() -> None:
    with pytest.raises(ValueError, match="NaN"):
        mean_se([0.5, math.nan])
    assert math.isnan(mean_se([0.1, 0.9], ["g", "g"]).se)


def test_estimate_methods_by_shape() -> None:
    ids = [f"t{i}" for i in range(40)]
    one = Run.from_counts(ids, [1] * 40, [1] * 30 + [0] * 10)
    e = estimate(one)
    assert e.method == "wilson" and (e.ci_low, e.ci_high) == pytest.approx(
        proportion_interval(30, 40, method="wilson")
    )
    many = Run.from_counts(ids, [4] * 40, [3] * 20 + [1] * 20)
    assert estimate(many).method == "t"
    cl = Run.from_counts(
        ids, [4] * 40, [3] * 20 + [1] * 20, clusters=[str(i // 4) for i in range(40)]
    )
    ec = estimate(cl)
    assert ec.method == "t-clustered" and ec.n_clusters == 10 and ec.se > estimate(many).se
    single = estimate(Run.from_counts(["a"], [10], [7]))
    assert single.method == "exact" and single.warnings
    assert (single.ci_low, single.ci_high) == pytest.approx(
        proportion_interval(7, 10, method="beta")
    )
    lo, hi = task_intervals(many)
    assert (lo <= many.rates()).all() and (hi >= many.rates()).all()


def test_estimate_refuses_all_infra_run() -> None:
    run = Run.from_rows([{"task_id": "a", "outcome": "infra"}] * 3, name="allinfra")
    with pytest.raises(RunError, match=r"allinfra: no scored samples.*infra=3"):
        estimate(run)


@pytest.mark.parametrize("method", ["wilson", "beta"])
def test_intervals_match_statsmodels(method: str) -> None:
    from statsmodels.stats.proportion import proportion_confint

    for n in (1, 2, 7, 40, 1000):
        for c in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            want = proportion_confint(c, n, alpha=0.05, method=method)
            assert proportion_interval(c, n, 0.05, method) == pytest.approx(want, abs=1e-12)
    run = Run.from_counts(["a", "b", "c"], [5, 5, 1], [0, 3, 1])
    lo, hi = task_intervals(run, 0.1, method)
    want_lo, want_hi = proportion_confint(run.c, run.n, alpha=0.1, method=method)
    assert lo == pytest.approx(want_lo, abs=1e-12) and hi == pytest.approx(want_hi, abs=1e-12)
    with pytest.raises(RunError, match="'wilson' or 'beta'"):
        proportion_interval(1, 2, method="agresti")


def test_a_summary_does_not_import_statsmodels() -> None:
    # The interval after a pass@1 run is on every `codegym score`'s path: statsmodels'
    # import (~1 s) must not be.
    code = (
        "import sys\n"
        "from codegym.evals.runs import Run\n"
        "from codegym.evals.stats import estimate\n"
        "ids = [f't{i}' for i in range(20)]\n"
        "estimate(Run.from_counts(ids, [1] * 20, [1] * 15 + [0] * 5))\n"
        "estimate(Run.from_counts(['a'], [3], [2]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'statsmodels'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_wilson_interval_covers_at_small_n() -> None:
    # Coverage by simulation: n = 10 tasks, one sample each, p = 0.2.
    rng = np.random.default_rng(0)
    c = rng.binomial(10, 0.2, 4000)
    lo, hi = zip(*(proportion_interval(int(x), 10) for x in c), strict=True)
    cover = np.mean((np.array(lo) <= 0.2) & (0.2 <= np.array(hi)))
    assert cover >= 0.93
