"""Sequential comparison: an always-valid confidence sequence on the paired difference.

Feed per-task paired differences (candidate - baseline pass rate, in [-1, 1]) as tasks finish,
in a random task order, and look after every batch: the sequence holds at every look at once,
so stopping as soon as the verdict is clear does not inflate alpha.

Two sequences, both two-sided at level alpha and intersected over time:

- ``mixture`` (default): Robbins' normal-mixture boundary with a plug-in variance, the
  asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Howard & Ramdas ("Time-uniform
  central limit theory and asymptotic confidence sequences", 2021/2024). Tightest near
  ``t_star`` observations; the variance carries one pseudo-observation so that a few equal
  early differences cannot produce a zero-width interval.
- ``eb``: the predictable plug-in empirical-Bernstein sequence of Waudby-Smith & Ramdas
  ("Estimating means of bounded random variables by betting", JRSS-B 2023, Thm 2) on
  X = (d + 1) / 2: valid at every sample size, but much wider when differences are small.

Verdicts follow ``codegym.evals.compare``: ``improved`` when the lower bound is > 0,
``regressed`` when the upper bound is < -margin; no verdict before ``min_n`` observations.

Contract: observations must be exchangeable (evaluate tasks in a random order); with clusters
of tasks, feed one difference per cluster (its mean).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats as sps
from statsmodels.stats.power import TTestPower

from codegym.evals.compare import Verdict
from codegym.evals.runs import RunError
from codegym.evals.simulate import draw_counts, shift_rates
from codegym.evals.stats import _check_alpha

FloatArray = npt.NDArray[np.float64]

_C = 0.5  # cap on the EB betting fraction lambda, as recommended by the paper
_PRIOR_VAR = 0.25  # one pseudo-observation of variance for the mixture sequence


def confidence_sequence(
    d: npt.ArrayLike,
    alpha: float = 0.05,
    method: Literal["mixture", "eb"] = "mixture",
    t_star: int = 100,
) -> tuple[FloatArray, FloatArray]:
    """Running (low, high) bounds on the mean of ``d`` in [-1, 1] after each observation.

    ``d`` may be 2-D (replicates, time): bounds are computed along the last axis. ``method``:
    ``mixture`` (asymptotic normal-mixture sequence, tightest near ``t_star`` observations) or
    ``eb`` (non-asymptotic empirical Bernstein, wider).

    Raises:
        RunError: values outside [-1, 1], NaN, or bad alpha.
    """
    _check_alpha(alpha)
    x = np.asarray(d, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x).all() or (np.abs(x) > 1).any():
        raise RunError("confidence_sequence needs finite differences in [-1, 1]")
    if method == "eb":
        return _eb(x, alpha)
    if method != "mixture":
        raise RunError(f"method must be 'mixture' or 'eb', got {method!r}")
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(x, axis=-1) / t
    # Running variance with a pseudo-observation of variance _PRIOR_VAR: early on, when the
    # first few differences happen to be equal, a zero variance would give a zero-width
    # interval and a false verdict.
    ss = np.cumsum(x * x, axis=-1) - t * mean * mean
    var = (_PRIOR_VAR + np.maximum(ss, 0.0)) / t
    la = -2 * math.log(alpha)
    rho2 = (la + math.log(la + 1)) / t_star  # mixture width tuned to be tightest at t_star
    half = np.sqrt(
        var * 2 * (t * rho2 + 1) / (t * t * rho2) * np.log(np.sqrt(t * rho2 + 1) / alpha)
    )
    low = np.maximum.accumulate(np.maximum(mean - half, -1.0), axis=-1)
    high = np.minimum.accumulate(np.minimum(mean + half, 1.0), axis=-1)
    return low, high


def _eb(d: FloatArray, alpha: float) -> tuple[FloatArray, FloatArray]:
    """Predictable plug-in empirical-Bernstein sequence (Waudby-Smith & Ramdas 2023, Thm 2)."""
    x = (d + 1) / 2
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    # Regularised running mean and variance (priors 1/2 and 1/4), then their "predictable"
    # versions: the values known before observation t.
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    var = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)
    mu_prev = np.concatenate([np.full((*x.shape[:-1], 1), 0.5), mu[..., :-1]], axis=-1)
    var_prev = np.concatenate([np.full((*x.shape[:-1], 1), 0.25), var[..., :-1]], axis=-1)
    log_term = math.log(2 / alpha)
    lam = np.minimum(np.sqrt(2 * log_term / (var_prev * t * np.log1p(t))), _C)
    v = 4 * (x - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4
    lam_sum = np.cumsum(lam, axis=-1)
    centre = np.cumsum(lam * x, axis=-1) / lam_sum
    half = (log_term + np.cumsum(v * psi, axis=-1)) / lam_sum
    low = np.maximum.accumulate(np.clip(centre - half, 0, 1), axis=-1)
    high = np.minimum.accumulate(np.clip(centre + half, 0, 1), axis=-1)
    return 2 * low - 1, 2 * high - 1


class SequentialState(BaseModel):
    """Where a sequential comparison stands after the latest batch."""

    model_config = ConfigDict(frozen=True)

    n: int = Field(description="differences seen so far")
    delta: float
    cs_low: float
    cs_high: float
    verdict: Verdict
    stop: bool = Field(description="the verdict is settled (or non-inferiority shown)")
    non_inferior: bool


class SequentialMonitor:
    """Check a comparison after every batch of tasks without inflating alpha.

    >>> m = SequentialMonitor(alpha=0.05, margin=0.02)
    >>> state = m.update([0.0, 1.0, -0.5])   # per-task differences, in random task order
    """

    def __init__(
        self,
        alpha: float = 0.05,
        margin: float = 0.0,
        t_star: int = 100,
        min_n: int = 20,
        method: Literal["mixture", "eb"] = "mixture",
    ) -> None:
        _check_alpha(alpha)
        if not 0 <= margin < 1:
            raise RunError(f"margin must be in [0, 1), got {margin!r}")
        if t_star < 1 or min_n < 1:
            raise RunError("t_star and min_n must be >= 1")
        self.alpha, self.margin, self.t_star, self.min_n = alpha, margin, t_star, min_n
        self.method: Literal["mixture", "eb"] = method
        self._d: list[float] = []

    def update(self, differences: npt.ArrayLike) -> SequentialState:
        """Add a batch of per-task differences and return the current state.

        Raises:
            RunError: an empty history, NaN, or a difference outside [-1, 1].
        """
        new = np.atleast_1d(np.asarray(differences, dtype=np.float64))
        if not np.isfinite(new).all() or (np.abs(new) > 1).any():
            raise RunError("differences must be finite and in [-1, 1]")
        self._d.extend(float(v) for v in new)
        if not self._d:
            raise RunError("no differences yet")
        low, high = confidence_sequence(np.array(self._d), self.alpha, self.method, self.t_star)
        lo, hi = float(low[-1]), float(high[-1])
        verdict: Verdict = "inconclusive"
        ready = len(self._d) >= self.min_n
        if ready and lo > 0:
            verdict = "improved"
        elif ready and hi < -self.margin:
            verdict = "regressed"
        non_inf = ready and lo > -self.margin
        return SequentialState(
            n=len(self._d),
            delta=float(np.mean(self._d)),
            cs_low=lo,
            cs_high=hi,
            verdict=verdict,
            stop=verdict != "inconclusive" or (non_inf and self.margin > 0),
            non_inferior=non_inf,
        )


class SavingsReport(BaseModel):
    """Sequential vs fixed-n testing on simulated suites, at the same alpha."""

    delta: float
    n_tasks: int
    samples: int
    alpha: float
    reps: int
    seq_power: float = Field(description="share of runs where the sequence found the change")
    seq_wrong: float = Field(description="share of runs with the wrong-direction verdict")
    seq_mean_tasks: float = Field(description="mean tasks evaluated before stopping")
    fixed_power: float = Field(description="paired t-test power using all n_tasks")
    fixed_tasks_same_power: float | None = Field(
        description="tasks a fixed-n paired t-test needs for seq_power"
    )
    saving: float | None = Field(description="1 - seq_mean_tasks / fixed_tasks_same_power")


def simulate_savings(
    p: FloatArray,
    delta: float,
    samples: int = 1,
    alpha: float = 0.05,
    reps: int = 2000,
    seed: int = 0,
    min_n: int = 20,
    method: Literal["mixture", "eb"] = "mixture",
) -> SavingsReport:
    """Simulate ``reps`` sequential comparisons over the tasks with true baseline rates ``p``
    and a candidate better by ``delta``, each task's difference revealed in a random order.

    The fair fixed-n comparator is the paired t-test that reaches the same power as the
    sequential procedure did; ``saving`` is the share of tasks the sequential test spares
    on average. With delta = 0 this measures the sequential false-positive rate instead.
    The sequence is tuned to be tightest at the suite size (``t_star = len(p)``).
    """
    rng = np.random.default_rng(seed)
    q = shift_rates(p, delta)
    ca = draw_counts(p, samples, reps, rng)
    cb = draw_counts(q, samples, reps, rng)
    d = (cb - ca) / samples
    d = np.take_along_axis(d, rng.random(d.shape).argsort(axis=1), axis=1)  # random task order
    t_n = p.size
    low, high = confidence_sequence(d, alpha, method, t_star=t_n)
    hit_up, hit_down = low > 0, high < 0
    hit_up[:, : min_n - 1] = hit_down[:, : min_n - 1] = False  # the same burn-in as the monitor
    first_up = np.where(hit_up.any(1), hit_up.argmax(1), t_n)
    first_down = np.where(hit_down.any(1), hit_down.argmax(1), t_n)
    stop = np.minimum(first_up, first_down)
    right = first_up < first_down if delta >= 0 else first_down < first_up
    wrong = (first_down < first_up) if delta >= 0 else (first_up < first_down)
    seq_power = float(right.mean()) if delta != 0 else 0.0
    test = sps.ttest_1samp(d, 0.0, axis=1)
    sig = np.nan_to_num(test.pvalue, nan=1.0) < alpha
    fixed_power = float((sig & (np.sign(test.statistic) == np.sign(delta or 1))).mean())
    fixed_same: float | None = None
    sd = float(d.std(ddof=1, axis=1).mean())
    if delta != 0 and seq_power > 0.05 and sd > 0:
        target = min(seq_power, 0.999)  # power 1 needs infinitely many tasks: cap it
        fixed_same = float(
            TTestPower().solve_power(effect_size=abs(delta) / sd, alpha=alpha, power=target)
        )
    mean_tasks = float((stop + 1).clip(max=t_n).mean())
    return SavingsReport(
        delta=delta,
        n_tasks=t_n,
        samples=samples,
        alpha=alpha,
        reps=reps,
        seq_power=seq_power,
        seq_wrong=float(wrong.mean()),
        seq_mean_tasks=mean_tasks,
        fixed_power=fixed_power,
        fixed_tasks_same_power=fixed_same,
        saving=1 - mean_tasks / fixed_same if fixed_same else None,
    )
