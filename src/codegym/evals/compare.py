"""Paired comparison of two runs over the same tasks, and the three-state verdict.

Contract (docs/statistics.md gives the reasoning):

- Both runs are collapsed per task (``codegym.evals.runs``); the runs are intersected on task
  id. Missing tasks give a warning; an overlap under ``min_overlap`` of the union, or under
  ``min_tasks`` tasks, is refused with :class:`RunError`.
- The estimand is ``delta`` = mean over tasks of (candidate - baseline) per-task pass@k.
- ``method`` is ``paired-t`` (t-interval over tasks, cluster-robust when tasks share clusters),
  ``paired-t+mcnemar`` (one sample per task on both sides: the p-value is the exact
  McNemar test's, and when fewer than 25 tasks disagree it must agree with the interval too,
  which guards the t-interval where its normal approximation fails) or ``bootstrap`` (k > 1, or when
  asked: a seeded paired percentile bootstrap that resamples clusters of tasks).
- With the two-sided (1 - alpha) interval ``[ci_low, ci_high]`` and margin ``m >= 0``:
  ``improved`` iff ``ci_low > 0``; ``regressed`` iff ``ci_high < -m``; else ``inconclusive``.
  ``non_inferior`` iff ``ci_low > -m`` (the candidate is shown to lose at most ``m``). These are
  computed as one-sided p-values ``< alpha/2`` (``p_improved``, ``p_regressed``,
  ``p_noninferior``) so that :func:`compare_suites` can Holm-correct them.
- ``mde`` is the smallest |delta| this comparison detects with probability ``power``.

Bad input raises :class:`RunError` naming the run and the fix; too little data gives
``inconclusive`` with a warning, never a confident verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from codegym.evals.runs import FloatArray, Run, RunError
from codegym.evals.stats import _check_alpha, _excluded_text, mean_se, t_quantile

Verdict = Literal["improved", "regressed", "inconclusive"]

_MCNEMAR_GUARD = 25  # discordant tasks below which the exact McNemar test must agree


@dataclass(frozen=True)
class CompareOptions:
    """How to compare. Defaults suit a CI gate on a suite of ~100+ tasks."""

    margin: float = 0.0
    """Non-inferiority margin (absolute pass-rate points, 0.02 = 2 points); >= 0."""
    alpha: float = 0.05
    """Two-sided level of the interval; each one-sided verdict errs with prob. <= alpha/2."""
    k: int = 1
    """Compare pass@k; k > 1 uses the paired bootstrap."""
    power: float = 0.8
    """Power at which ``mde`` is reported."""
    min_overlap: float = 0.5
    """Refuse when the shared tasks are fewer than this fraction of the union of tasks."""
    min_tasks: int = 10
    """Refuse when fewer tasks than this are shared."""
    method: Literal["auto", "t", "bootstrap"] = "auto"
    """``auto``: t (+McNemar) for k = 1, bootstrap for k > 1."""
    n_boot: int = 2000
    """Bootstrap resamples."""
    seed: int = 0
    """Bootstrap seed: the same inputs give the same result."""

    def check(self) -> None:
        """Raises RunError (a ValueError) naming the bad option."""
        _check_alpha(self.alpha)
        if not (math.isfinite(self.margin) and 0 <= self.margin < 1):
            raise RunError(f"margin must be in [0, 1), got {self.margin!r}")
        if not (isinstance(self.k, int) and self.k >= 1):
            raise RunError(f"k must be a positive integer, got {self.k!r}")
        if not 0 < self.power < 1:
            raise RunError(f"power must be in (0, 1), got {self.power!r}")
        if not 0 <= self.min_overlap <= 1 or self.min_tasks < 1:
            raise RunError("min_overlap must be in [0, 1] and min_tasks >= 1")
        if self.n_boot < 100:
            raise RunError(f"n_boot must be >= 100, got {self.n_boot}")


class CostDelta(BaseModel):
    """Mean of one per-sample resource field on each side."""

    baseline: float | None
    candidate: float | None
    ratio: float | None = Field(description="candidate / baseline, when both are > 0")


class CompareResult(BaseModel):
    """The outcome of a comparison; ``model_dump()`` is the ``--json`` output."""

    model_config = ConfigDict(frozen=True)

    verdict: Verdict
    non_inferior: bool = Field(description="ci_low > -margin: the candidate loses at most margin")
    delta: float | None = Field(description="mean paired difference, candidate - baseline")
    ci_low: float | None
    ci_high: float | None
    p_value: float | None = Field(description="two-sided, H0: delta = 0")
    p_improved: float | None = Field(description="one-sided, H0: delta <= 0")
    p_regressed: float | None = Field(description="one-sided, H0: delta >= -margin")
    p_noninferior: float | None = Field(description="one-sided, H0: delta <= -margin")
    se: float | None
    baseline_mean: float | None
    candidate_mean: float | None
    n_tasks: int
    n_clusters: int
    mde: float | None = Field(description="smallest |delta| detected with prob. `power`")
    power: float
    correlation: float | None = Field(description="Pearson r of per-task scores, A vs B")
    margin: float
    alpha: float
    k: int
    method: str
    warnings: list[str]
    excluded: dict[str, dict[str, int]] = Field(description="side -> infra outcome -> samples")
    flaky: dict[str, int] = Field(description="side -> samples dropped as flaky")
    dropped_tasks: dict[str, int] = Field(description="tasks only in one run")
    costs: dict[str, CostDelta] = Field(description="field -> per-sample means and ratio")
    suites: dict[str, CompareResult] | None = Field(
        default=None, description="per-suite results (Holm-corrected) when runs carry suites"
    )


def compare(baseline: Run, candidate: Run, options: CompareOptions | None = None) -> CompareResult:
    """Paired comparison of ``candidate`` against ``baseline``.

    Raises:
        RunError: bad options, a run with no scored samples, or too small a task overlap.
    """
    opts = options or CompareOptions()
    opts.check()
    warnings: list[str] = []
    a, b = _align(baseline, candidate, opts, warnings)
    va, vb = a.pass_at_k(opts.k), b.pass_at_k(opts.k)
    d = vb - va
    clusters = a.clusters if a.clustered else None
    if a.clusters != b.clusters:
        warnings.append("cluster labels differ between runs; using the baseline's")
    use_boot = opts.method == "bootstrap" or (opts.method == "auto" and opts.k > 1)
    exact = not use_boot and bool((a.n == 1).all() and (b.n == 1).all()) and opts.k == 1
    if use_boot:
        t = _bootstrap(d, clusters, opts)
        method = "bootstrap"
    else:
        t = _paired_t(d, clusters, opts)
        method = "paired-t+mcnemar" if exact else "paired-t"
    if exact and t.se is not None:
        t = _with_mcnemar(t, va, vb)
    if t.n_clusters < 2:
        warnings.append(
            f"{t.n_clusters} cluster(s): no error bar can be computed, verdict inconclusive"
        )
    elif t.n_clusters < 10:
        warnings.append(f"only {t.n_clusters} clusters: intervals are rough")
    verdict, non_inf = _decide(t.p_improved, t.p_regressed, t.p_noninferior, opts.alpha)
    q = (
        t_quantile(1 - opts.alpha / 2, t.df) + t_quantile(opts.power, t.df)
        if t.df < 10**6
        else float(sps.norm.ppf(1 - opts.alpha / 2) + sps.norm.ppf(opts.power))
    )
    return CompareResult(
        verdict=verdict,
        non_inferior=non_inf,
        delta=float(d.mean()),
        ci_low=t.ci_low,
        ci_high=t.ci_high,
        p_value=t.p_value,
        p_improved=t.p_improved,
        p_regressed=t.p_regressed,
        p_noninferior=t.p_noninferior,
        se=t.se,
        baseline_mean=float(va.mean()),
        candidate_mean=float(vb.mean()),
        n_tasks=len(d),
        n_clusters=t.n_clusters,
        mde=_finite(q * t.se) if t.se is not None else None,
        power=opts.power,
        correlation=_correlation(va, vb),
        margin=opts.margin,
        alpha=opts.alpha,
        k=opts.k,
        method=method,
        warnings=warnings,
        excluded={"baseline": dict(baseline.excluded), "candidate": dict(candidate.excluded)},
        flaky={"baseline": len(baseline.flaky), "candidate": len(candidate.flaky)},
        dropped_tasks={
            "baseline_only": len(set(baseline.task_ids) - set(candidate.task_ids)),
            "candidate_only": len(set(candidate.task_ids) - set(baseline.task_ids)),
        },
        costs=_costs(baseline, candidate),
    )


def compare_suites(
    pairs: Mapping[str, tuple[Run, Run]], options: CompareOptions | None = None
) -> tuple[Verdict, dict[str, CompareResult]]:
    """Compare several suites at once with Holm's correction across suites.

    Each suite's one-sided p-values are Holm-adjusted within their family (improved,
    regressed, non-inferior) and its verdict recomputed from them. Overall: ``regressed`` if
    any suite regressed; ``improved`` if some suite improved and every suite is non-inferior;
    else ``inconclusive``.

    Raises:
        RunError: as :func:`compare`, naming the suite.
    """
    opts = options or CompareOptions()
    if not pairs:
        raise RunError("no suites to compare")
    raw: dict[str, CompareResult] = {}
    for name, (a, b) in pairs.items():
        try:
            raw[name] = compare(a, b, opts)
        except RunError as e:
            raise RunError(f"suite {name!r}: {e}") from None
    names = list(raw)
    adj: dict[str, list[float | None]] = {}
    for fam in ("p_improved", "p_regressed", "p_noninferior"):
        ps = [getattr(raw[s], fam) for s in names]
        ok = [i for i, p in enumerate(ps) if p is not None]
        out: list[float | None] = [None] * len(names)
        if ok:
            corrected = multipletests([ps[i] for i in ok], method="holm")[1]
            for i, p in zip(ok, corrected, strict=True):
                out[i] = float(p)
        adj[fam] = out
    results: dict[str, CompareResult] = {}
    for i, s in enumerate(names):
        pi, pr, pn = adj["p_improved"][i], adj["p_regressed"][i], adj["p_noninferior"][i]
        verdict, non_inf = _decide(pi, pr, pn, opts.alpha)
        note = f"Holm-corrected over {len(names)} suites"
        results[s] = raw[s].model_copy(
            update={
                "verdict": verdict,
                "non_inferior": non_inf,
                "p_improved": pi,
                "p_regressed": pr,
                "p_noninferior": pn,
                "warnings": [*raw[s].warnings, note],
            }
        )
    verdicts = [r.verdict for r in results.values()]
    overall: Verdict = "inconclusive"
    if "regressed" in verdicts:
        overall = "regressed"
    elif "improved" in verdicts and all(
        r.non_inferior or r.verdict == "improved" for r in results.values()
    ):
        overall = "improved"
    return overall, results


def compare_runs(
    baseline: Run, candidate: Run, options: CompareOptions | None = None
) -> CompareResult:
    """What ``codegym compare`` computes: :func:`compare`, split by suite when labelled.

    With several suites the top-level numbers are pooled over all shared tasks, while
    ``verdict`` and ``non_inferior`` are the Holm-corrected overall ones and ``suites`` holds
    each suite's result.
    """
    opts = options or CompareOptions()
    sa, sb = baseline.by_suite(), candidate.by_suite()
    shared = [s for s in sa if s in sb]
    pooled = compare(baseline, candidate, opts)
    if len(sa) <= 1 and len(sb) <= 1:
        return pooled
    warns = list(pooled.warnings)
    missing = sorted((set(sa) | set(sb)) - set(shared))
    if missing:
        warns.append(f"suites in only one run are left out of the verdict: {missing}")
    overall, per = compare_suites({s: (sa[s], sb[s]) for s in shared}, opts)
    warns.append(
        f"verdict is the Holm-corrected overall verdict over {len(shared)} suites; "
        "delta and its interval are pooled over all shared tasks"
    )
    return pooled.model_copy(
        update={
            "verdict": overall,
            "non_inferior": all(r.non_inferior for r in per.values()),
            "warnings": warns,
            "suites": per,
        }
    )


# --- machinery ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Test:
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_improved: float | None
    p_regressed: float | None
    p_noninferior: float | None
    se: float | None
    df: int
    n_clusters: int


def _align(
    baseline: Run, candidate: Run, opts: CompareOptions, warnings: list[str]
) -> tuple[Run, Run]:
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        if run.n_tasks == 0:
            raise RunError(f"{side} {run.name} has no scored samples ({_excluded_text(run)})")
    cand = set(candidate.task_ids)
    common = [t for t in baseline.task_ids if t in cand]
    union = len(set(baseline.task_ids) | cand)
    if opts.k > 1:
        ia, ib = baseline.index(), candidate.index()
        short = [t for t in common if baseline.n[ia[t]] < opts.k or candidate.n[ib[t]] < opts.k]
        if short:
            warnings.append(f"{len(short)} shared task(s) have < {opts.k} samples: left out")
            common = [t for t in common if t not in set(short)]
    if len(common) < opts.min_tasks or len(common) < opts.min_overlap * union:
        raise RunError(
            f"{baseline.name} and {candidate.name} share {len(common)} usable task(s) out of "
            f"{union}; need >= {opts.min_tasks} and >= {opts.min_overlap:.0%} of all tasks. "
            "Compare runs of the same suite (or lower --min-tasks / --min-overlap)."
        )
    if len(common) < union:
        warnings.append(
            f"runs cover different tasks: comparing the {len(common)} shared of {union} "
            f"({len(baseline.task_ids) - len(common)} baseline-only, "
            f"{len(candidate.task_ids) - len(common)} candidate-only left out)"
        )
    a, b = baseline.select(common), candidate.select(common)
    if not np.array_equal(a.n, b.n):
        warnings.append(
            f"sample counts differ per task (baseline median {np.median(a.n):g}, candidate "
            f"median {np.median(b.n):g}); per-task rates stay unbiased"
        )
    return a, b


def _paired_t(d: FloatArray, clusters: tuple[str, ...] | None, opts: CompareOptions) -> _Test:
    ms = mean_se(d, clusters)
    if ms.n_clusters < 2:
        return _Test(None, None, None, None, None, None, None, 0, ms.n_clusters)
    dist = sps.t(ms.df)
    half = float(dist.ppf(1 - opts.alpha / 2)) * ms.se

    def z(x: float) -> float:
        if ms.se > 0:
            return x / ms.se
        return 0.0 if x == 0 else math.copysign(math.inf, x)  # every task moved the same way

    m = opts.margin
    return _Test(
        ci_low=ms.mean - half,
        ci_high=ms.mean + half,
        p_value=float(min(1.0, 2 * dist.sf(abs(z(ms.mean))))),
        p_improved=float(dist.sf(z(ms.mean))),
        p_regressed=float(dist.cdf(z(ms.mean + m))),
        p_noninferior=float(dist.sf(z(ms.mean + m))),
        se=ms.se,
        df=ms.df,
        n_clusters=ms.n_clusters,
    )


def _with_mcnemar(t: _Test, va: FloatArray, vb: FloatArray) -> _Test:
    """One sample per task: the t-interval is anti-conservative when few tasks disagree, so
    with fewer than ``_MCNEMAR_GUARD`` discordant tasks a verdict also needs the exact McNemar
    test (the larger p-value of the two wins). Above it the normal approximation holds and the
    exact test would only cost power. The reported ``p_value`` is McNemar's in both cases."""
    worse = int(((va == 1) & (vb == 0)).sum())
    better = int(((va == 0) & (vb == 1)).sum())
    n = worse + better
    if n >= _MCNEMAR_GUARD:
        p_two = float(mcnemar([[0, worse], [better, 0]], exact=True).pvalue)
        return _Test(t.ci_low, t.ci_high, p_two, t.p_improved, t.p_regressed, t.p_noninferior,
                     t.se, t.df, t.n_clusters)  # fmt: skip
    if n == 0:
        p_two, p_up, p_down = 1.0, 1.0, 1.0
    else:
        p_two = float(mcnemar([[0, worse], [better, 0]], exact=True).pvalue)
        p_up = float(sps.binomtest(better, n, 0.5, alternative="greater").pvalue)
        p_down = float(sps.binomtest(better, n, 0.5, alternative="less").pvalue)
    assert t.p_improved is not None and t.p_regressed is not None
    return _Test(
        t.ci_low,
        t.ci_high,
        p_two,
        max(t.p_improved, p_up),
        max(t.p_regressed, p_down),
        t.p_noninferior,
        t.se,
        t.df,
        t.n_clusters,
    )


def _bootstrap(d: FloatArray, clusters: tuple[str, ...] | None, opts: CompareOptions) -> _Test:
    # Resample whole clusters (tasks when unclustered): the statistic is the ratio of summed
    # differences to summed task counts, so clusters of unequal size are weighted right.
    sums: FloatArray = d
    counts: FloatArray = np.ones_like(d)
    if clusters is not None:
        _, inv = np.unique(np.asarray(clusters), return_inverse=True)
        sums = np.asarray(np.bincount(inv, weights=d), dtype=np.float64)
        counts = np.bincount(inv).astype(np.float64)  # cluster sizes
    g = len(sums)
    if g < 2:
        return _Test(None, None, None, None, None, None, None, 0, g)

    def ratio(s: FloatArray, c: FloatArray, axis: int = -1) -> FloatArray:
        out: FloatArray = s.sum(axis=axis) / c.sum(axis=axis)
        return out

    res = sps.bootstrap(
        (sums, counts),
        ratio,
        paired=True,
        vectorized=True,
        n_resamples=opts.n_boot,
        confidence_level=1 - opts.alpha,
        method="percentile",
        rng=np.random.default_rng(opts.seed),
    )
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    m = opts.margin
    below0, above0 = float((dist <= 0).mean()), float((dist >= 0).mean())
    return _Test(
        ci_low=float(res.confidence_interval.low),
        ci_high=float(res.confidence_interval.high),
        p_value=min(1.0, 2 * min(below0, above0)),
        p_improved=below0,
        p_regressed=float((dist >= -m).mean()),
        p_noninferior=float((dist <= -m).mean()),
        se=float(res.standard_error),
        df=10**6,
        n_clusters=g,
    )


def _decide(
    p_improved: float | None, p_regressed: float | None, p_noninf: float | None, alpha: float
) -> tuple[Verdict, bool]:
    """improved / regressed / inconclusive from one-sided p-values at alpha/2 each."""
    if p_improved is None or p_regressed is None or p_noninf is None:
        return "inconclusive", False
    if p_regressed < alpha / 2:
        return "regressed", False
    if p_improved < alpha / 2:
        return "improved", True
    return "inconclusive", p_noninf < alpha / 2


def _correlation(va: FloatArray, vb: FloatArray) -> float | None:
    if len(va) < 3 or va.std() == 0 or vb.std() == 0:
        return None
    return float(np.corrcoef(va, vb)[0, 1])


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _costs(a: Run, b: Run) -> dict[str, CostDelta]:
    out: dict[str, CostDelta] = {}
    for f in dict.fromkeys([*a.costs, *b.costs]):
        x, y = a.costs.get(f), b.costs.get(f)
        ratio = y / x if x is not None and y is not None and x > 0 else None
        out[f] = CostDelta(baseline=x, candidate=y, ratio=ratio)
    return out
