"""Error bars for one run: means over tasks with clustered standard errors, small-n intervals.

The unit of analysis is the task (see ``codegym.evals.runs``). A suite score is the unweighted
mean of per-task values (pass rate, or unbiased pass@k); its standard error is the CLT one over
tasks, or over clusters of tasks when tasks share a ``cluster`` label (cluster-robust, "CR1":
``G/(G-1) * sum_g (sum_{i in g} r_i)^2 / N^2``, the same as statsmodels' OLS
``cov_type="cluster"`` on a constant). Intervals use Student's t with ``G-1`` degrees of
freedom. With one sample per task and no clusters the suite score is a plain proportion and gets
a Wilson interval; a single task gets an exact (Clopper-Pearson) interval and a warning.

Distributions come from scipy (``scipy.special``'s quantiles, so that no summary pays
scipy.stats' or statsmodels' import); nothing here hand-rolls one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from codegym.evals.runs import Run, RunError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MeanSE:
    """A mean over units with its (clustered) standard error."""

    mean: float
    se: float
    """NaN when fewer than two clusters."""
    df: int
    """Degrees of freedom for t: clusters - 1."""
    n_units: int
    n_clusters: int


def mean_se(values: npt.ArrayLike, clusters: Sequence[str] | None = None) -> MeanSE:
    """Mean of ``values`` and its CLT standard error, clustered when labels repeat.

    Raises:
        RunError: empty input, NaN values, or a cluster list of the wrong length.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise RunError("mean_se needs a non-empty 1-D array")
    if not np.isfinite(x).all():
        raise RunError("mean_se: values contain NaN or inf")
    n = x.size
    m = float(x.mean())
    r = x - m
    if clusters is None:
        g = n
        ss = float(r @ r)
    else:
        if len(clusters) != n:
            raise RunError(f"mean_se: {len(clusters)} cluster labels for {n} values")
        _, inv = np.unique(np.asarray(clusters), return_inverse=True)
        sums = np.bincount(inv, weights=r)
        g = sums.size
        ss = float(sums @ sums)
    se = math.sqrt(g / (g - 1) * ss) / n if g > 1 else math.nan
    return MeanSE(m, se, g - 1, n, g)


def t_quantile(q: float, df: int) -> float:
    """Student-t quantile; normal when df is huge. NaN for df < 1."""
    if df < 1:
        return math.nan
    # scipy.special's inverse t CDF is scipy.stats.t.ppf without the 0.7 s import of
    # scipy.stats, which every command that prints a pass@k paid after its last run.
    return float(special.stdtrit(df, q))


@dataclass(frozen=True)
class Estimate:
    """A suite-level score with its interval."""

    mean: float
    ci_low: float
    ci_high: float
    se: float
    n_tasks: int
    n_clusters: int
    method: str
    """``t`` (CLT over tasks), ``t-clustered``, ``wilson`` or ``exact``."""
    warnings: tuple[str, ...] = ()


def estimate(run: Run, k: int = 1, alpha: float = 0.05) -> Estimate:
    """pass@k of a run over its tasks, with a (1 - alpha) interval.

    Raises:
        RunError: the run has no scored task, or a task has fewer than k samples.
    """
    _check_alpha(alpha)
    if run.n_tasks == 0:
        raise RunError(f"{run.name}: no scored samples ({_excluded_text(run)})")
    values = run.pass_at_k(k)
    if run.n_tasks == 1:
        n, c = int(run.n[0]), int(run.c[0])
        lo, hi = proportion_interval(c, n, alpha, method="beta") if k == 1 else (0.0, 1.0)
        return Estimate(
            float(values[0]), lo, hi, math.nan, 1, 1, "exact",
            ("one task only: the interval covers that task, not a suite",),
        )  # fmt: skip
    if k == 1 and not run.clustered and bool((run.n == 1).all()):
        c_total = int(run.c.sum())
        lo, hi = proportion_interval(c_total, run.n_tasks, alpha, method="wilson")
        ms = mean_se(values)
        return Estimate(ms.mean, lo, hi, ms.se, run.n_tasks, run.n_tasks, "wilson")
    ms = mean_se(values, run.clusters if run.clustered else None)
    half = t_quantile(1 - alpha / 2, ms.df) * ms.se
    warns: tuple[str, ...] = ()
    if ms.n_clusters < 10:
        warns = (f"only {ms.n_clusters} clusters: the CLT interval is rough",)
    return Estimate(
        ms.mean,
        max(0.0, ms.mean - half),
        min(1.0, ms.mean + half),
        ms.se,
        ms.n_units,
        ms.n_clusters,
        "t-clustered" if run.clustered else "t",
        warns,
    )


def proportion_interval(
    successes: int, n: int, alpha: float = 0.05, method: str = "wilson"
) -> tuple[float, float]:
    """Interval for a binomial proportion: ``wilson`` or ``beta`` (exact Clopper-Pearson)."""
    _check_alpha(alpha)
    if n <= 0:
        return (0.0, 1.0)
    lo, hi = _binomial_interval(np.asarray(successes), np.asarray(n), alpha, method)
    return (float(lo), float(hi))


def task_intervals(
    run: Run, alpha: float = 0.05, method: str = "wilson"
) -> tuple[FloatArray, FloatArray]:
    """Per-task pass-rate intervals (arrays aligned with ``run.task_ids``)."""
    _check_alpha(alpha)
    return _binomial_interval(run.c, run.n, alpha, method)


def _binomial_interval(
    c: npt.ArrayLike, n: npt.ArrayLike, alpha: float, method: str
) -> tuple[FloatArray, FloatArray]:
    # statsmodels' proportion_confint gives the same figures (the tests compare them), but
    # importing it costs ~1 s, which every pass@1 summary paid after its last run; the
    # quantiles here come from scipy.special, already loaded for the t interval.
    c, n = np.asarray(c, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if method == "wilson":
        z = float(special.ndtri(1 - alpha / 2))
        p, z2 = c / n, z * z
        centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        half = z / (1 + z2 / n) * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
        return centre - half, centre + half
    if method == "beta":
        with np.errstate(invalid="ignore", divide="ignore"):
            lo = np.where(c > 0, special.betaincinv(c, n - c + 1, alpha / 2), 0.0)
            hi = np.where(c < n, special.betaincinv(c + 1, n - c, 1 - alpha / 2), 1.0)
        return lo, hi
    raise RunError(f"interval method must be 'wilson' or 'beta', got {method!r}")


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0 < alpha < 1):
        raise RunError(f"alpha must be in (0, 1), got {alpha!r}")


def _excluded_text(run: Run) -> str:
    parts = [f"{k}={v}" for k, v in run.excluded.items()]
    if run.flaky:
        parts.append(f"flaky={len(run.flaky)}")
    return f"{run.requested} rows; excluded: {', '.join(parts) or 'none'}"
