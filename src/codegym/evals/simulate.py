"""Simulated models with known per-task pass probabilities, for checking the statistics.

Used by the tests (A/A false-positive rate, A/B power, coverage) and by
``codegym.evals.sequential.simulate_savings``. Everything is seeded and vectorised: one call
draws many replicate runs at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from codegym.evals.runs import Run, RunError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def true_rates(
    n_tasks: int, rng: np.random.Generator, a: float = 0.4, b: float = 0.4
) -> FloatArray:
    """Per-task pass probabilities drawn from Beta(a, b): the U shape of real code suites,
    where most tasks are nearly always or nearly never solved."""
    out: FloatArray = rng.beta(a, b, n_tasks)
    return out


def shift_rates(p: FloatArray, delta: float) -> FloatArray:
    """Candidate rates whose mean differs from ``p``'s by exactly ``delta``.

    A gain fixes the same fraction of each task's failures (p + f (1 - p)); a loss breaks the
    same fraction of its passes (p - f p). Rates stay in [0, 1].

    Raises:
        RunError: |delta| larger than the room left (mean failures or mean passes).
    """
    if delta >= 0:
        room = float((1 - p).mean())
        if delta > room:
            raise RunError(f"delta {delta} exceeds the mean failure rate {room:.3f}")
        out: FloatArray = p + (delta / room) * (1 - p) if room > 0 else p.copy()
    else:
        room = float(p.mean())
        if -delta > room:
            raise RunError(f"delta {delta} exceeds the mean pass rate {room:.3f}")
        out = p + (delta / room) * p
    return out


def draw_counts(
    p: FloatArray, samples: int | IntArray, reps: int, rng: np.random.Generator
) -> IntArray:
    """Passes per task for ``reps`` replicate runs: an array (reps, n_tasks)."""
    n = np.broadcast_to(np.asarray(samples, dtype=np.int64), p.shape)
    out: IntArray = rng.binomial(n, p, size=(reps, p.size)).astype(np.int64)
    return out


def runs_from_counts(
    c: IntArray,
    samples: int | IntArray,
    clusters: list[str] | None = None,
    name: str = "sim",
) -> list[Run]:
    """One :class:`Run` per replicate row of ``c`` (same task ids ``t0``, ``t1``, ...)."""
    ids = [f"t{i}" for i in range(c.shape[1])]
    n = np.broadcast_to(np.asarray(samples, dtype=np.int64), (c.shape[1],))
    return [Run.from_counts(ids, n, row, clusters, name=f"{name}{r}") for r, row in enumerate(c)]
