"""Power planning: how many tasks x samples per task detect a change of ``delta``?

Model (docs/statistics.md): task i has true pass rates ``a_i`` (baseline) and ``b_i``
(candidate); each run draws S samples per task. The candidate is assumed to fix the same
fraction f of every task's failures (delta > 0: b = a + f (1 - a), f = delta / (1 - mean a))
or break the same fraction of its passes (delta < 0: b = a (1 - f)), plus task-specific
changes, summarised by ``rho``, the correlation of a_i and b_i across tasks. The paired
per-task difference of observed rates then has variance

    V(S) = deff * ( sigma_b^2 * (1 + (1 - f)^2 - 2 rho (1 - f)) + (w_A + w_B) / S )

with, estimated from the baseline run: ``sigma_b^2`` the between-task variance of true rates
(variance of observed rates minus their mean sampling variance), ``w_A = sigma_w^2`` the mean
per-sample variance a (1 - a), ``w_B`` the same for the shifted rates (a function of f, the
mean, sigma_b^2 and sigma_w^2), and ``deff`` the design effect of clustering. ``rho`` cannot be
estimated from one run, so it is an input (default 0.8; 1 means the change is exactly the
proportional one). Power is that of the paired t-test on T tasks (statsmodels ``TTestPower``),
matching the ``paired-t`` method of ``codegym.evals.compare``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats as sps
from statsmodels.stats.power import TTestPower

from codegym.evals.runs import Run, RunError
from codegym.evals.stats import _check_alpha, mean_se


class VarianceComponents(BaseModel):
    """Variance of a suite score split into its parts, estimated from one run."""

    model_config = ConfigDict(frozen=True)

    mean: float = Field(description="mean per-task pass rate")
    between: float = Field(description="sigma_b^2: variance of true per-task rates")
    within: float = Field(description="sigma_w^2: mean per-sample Bernoulli variance")
    deff: float = Field(description="design effect of clustering (>= 1)")
    n_tasks: int
    samples_per_task: float = Field(description="median scored samples per task")


class PlanRow(BaseModel):
    samples_per_task: int
    tasks_needed: int = Field(description="tasks needed at this many samples per task")
    power_at_suite_size: float = Field(description="power with the baseline's task count")


class PowerPlan(BaseModel):
    """Answer of :func:`plan`; ``model_dump()`` is the ``--json`` output of ``codegym plan``."""

    model_config = ConfigDict(frozen=True)

    delta: float
    alpha: float
    power: float
    correlation: float
    components: VarianceComponents
    rows: list[PlanRow]
    samples_needed_at_suite_size: int | None = Field(
        description="samples per task reaching `power` with the baseline's tasks; None if none"
    )
    warnings: list[str]


def variance_components(run: Run) -> VarianceComponents:
    """Between-task, within-task and clustering components of a run's variance.

    Raises:
        RunError: no scored tasks, or no task with >= 2 samples (within-task variance is then
            not identifiable).
    """
    if run.n_tasks < 2:
        raise RunError(f"{run.name}: planning needs >= 2 scored tasks, got {run.n_tasks}")
    multi = run.n >= 2
    if not multi.any():
        raise RunError(
            f"{run.name}: every task has one sample, so between-task and within-task variance "
            "cannot be told apart; re-run the baseline with 2 or more samples per task (-n 2)"
        )
    p = run.rates()
    n = run.n[multi]
    w = p[multi] * (1 - p[multi]) * n / (n - 1)  # unbiased p(1-p) per task
    within = float(w.mean())
    # The observed spread of rates = true spread + average sampling variance p(1-p)/n.
    between = max(0.0, float(p.var(ddof=1)) - float(np.mean(within / run.n)))
    deff = 1.0
    if run.clustered:
        clustered, plain = mean_se(p, run.clusters), mean_se(p)
        if plain.se > 0 and math.isfinite(clustered.se):
            deff = max(1.0, (clustered.se / plain.se) ** 2)
    return VarianceComponents(
        mean=float(p.mean()),
        between=between,
        within=within,
        deff=deff,
        n_tasks=run.n_tasks,
        samples_per_task=float(np.median(run.n)),
    )


def shift_fraction(comp: VarianceComponents, delta: float) -> float:
    """f: the share of failures fixed (delta > 0) or passes broken (delta < 0).

    Raises:
        RunError: the change is larger than the room the baseline leaves.
    """
    room = 1 - comp.mean if delta > 0 else comp.mean
    if room <= 0 or abs(delta) >= room:
        raise RunError(f"delta {delta:+.3f} is impossible from a baseline mean of {comp.mean:.3f}")
    return abs(delta) / room


def between_variance(comp: VarianceComponents, delta: float, correlation: float) -> float:
    """Variance across tasks of the true per-task change b_i - a_i."""
    g = 1 - shift_fraction(comp, delta)
    return comp.between * max(0.0, 1 + g * g - 2 * correlation * g)


def within_variance(comp: VarianceComponents, delta: float) -> float:
    """w_A + w_B: per-sample variance of both sides under the proportional change."""
    f = shift_fraction(comp, delta)
    # E[b(1-b)] for b = a + f(1-a) is (1-f)(E[a(1-a)] + f E[(1-a)^2]); mirror for losses.
    second = (1 - comp.mean) ** 2 if delta > 0 else comp.mean**2
    w_b = (1 - f) * (comp.within + f * (second + comp.between))
    return comp.within + w_b


def diff_variance(
    comp: VarianceComponents, delta: float, samples: int, correlation: float
) -> float:
    """V(S): variance of one task's paired difference with ``samples`` per side."""
    return comp.deff * (
        between_variance(comp, delta, correlation) + within_variance(comp, delta) / samples
    )


def predicted_power(
    comp: VarianceComponents,
    delta: float,
    tasks: int,
    samples: int,
    alpha: float = 0.05,
    correlation: float = 0.8,
) -> float:
    """Probability that the paired test calls a true change ``delta`` significant."""
    v = diff_variance(comp, delta, samples, correlation)
    if v <= 0:
        return 1.0
    es = abs(delta) / math.sqrt(v)
    if tasks > 10**4:  # see _tasks_needed: use the normal limit
        z = float(sps.norm.ppf(1 - alpha / 2))
        return float(sps.norm.cdf(es * math.sqrt(tasks) - z))
    return float(TTestPower().power(effect_size=es, nobs=tasks, alpha=alpha))


def plan(
    baseline: Run,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.8,
    correlation: float = 0.8,
    samples: Sequence[int] = (1, 2, 5, 10, 20, 50, 100),
) -> PowerPlan:
    """Tasks x samples per task needed to detect a change of ``delta`` (absolute rate).

    Raises:
        RunError: delta, alpha, power or correlation out of range.
        RunError: the baseline cannot be planned from (see :func:`variance_components`).
    """
    _check_alpha(alpha)
    if not (math.isfinite(delta) and 0 < abs(delta) < 1):
        raise RunError(f"delta must be a non-zero rate change in (-1, 1), got {delta!r}")
    if not 0 < power < 1:
        raise RunError(f"power must be in (0, 1), got {power!r}")
    if not -1 <= correlation <= 1:
        raise RunError(f"correlation must be in [-1, 1], got {correlation!r}")
    comp = variance_components(baseline)
    shift_fraction(comp, delta)  # raises on an impossible delta before any work
    warnings: list[str] = []
    if comp.samples_per_task < 3:
        warnings.append("few samples per task in the baseline: the variance split is rough")
    analysis = TTestPower()
    rows: list[PlanRow] = []
    for s in samples:
        v = diff_variance(comp, delta, s, correlation)
        es = abs(delta) / math.sqrt(v) if v > 0 else math.inf
        need = 2 if math.isinf(es) else _tasks_needed(analysis, es, alpha, power)
        rows.append(
            PlanRow(
                samples_per_task=s,
                tasks_needed=need,
                power_at_suite_size=predicted_power(
                    comp, delta, comp.n_tasks, s, alpha, correlation
                ),
            )
        )
    es_star = float(
        np.ravel(
            analysis.solve_power(effect_size=None, nobs=comp.n_tasks, alpha=alpha, power=power)
        )[0]
    )  # statsmodels returns a 1-element array when solving for the effect size
    v_star = (abs(delta) / es_star) ** 2 / comp.deff
    room = v_star - between_variance(comp, delta, correlation)
    s_needed = math.ceil(within_variance(comp, delta) / room) if room > 0 else None
    if s_needed is None:
        warnings.append(
            f"with {comp.n_tasks} tasks no number of samples reaches power {power}: "
            "between-task variance alone is too large; add tasks"
        )
    return PowerPlan(
        delta=delta,
        alpha=alpha,
        power=power,
        correlation=correlation,
        components=comp,
        rows=rows,
        samples_needed_at_suite_size=max(1, s_needed) if s_needed is not None else None,
        warnings=warnings,
    )


def _tasks_needed(analysis: TTestPower, es: float, alpha: float, power: float) -> int:
    z = float(sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power))
    approx = (z / es) ** 2
    if approx > 10**4:
        # statsmodels' noncentral t turns NaN for huge n, where t is normal anyway.
        return math.ceil(approx)
    n = float(
        np.ravel(analysis.solve_power(effect_size=es, nobs=None, alpha=alpha, power=power))[0]
    )
    return max(2, math.ceil(n if math.isfinite(n) else approx))
