"""Evaluation: pass@k, statistics, comparisons and reports.

Names load on first use (PEP 562): the statistics pull in scipy and statsmodels, which a
command that only scores samples should not pay for at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegym._lazy import lazy_exports

if TYPE_CHECKING:
    from codegym.evals.compare import (
        CompareOptions,
        CompareResult,
        CostDelta,
        compare,
        compare_runs,
        compare_suites,
    )
    from codegym.evals.passk import pass_at_k, summarize, wilson_interval
    from codegym.evals.power import PowerPlan, plan, predicted_power, variance_components
    from codegym.evals.runs import Run, RunError, load_run
    from codegym.evals.sequential import SequentialMonitor, confidence_sequence, simulate_savings
    from codegym.evals.stats import Estimate, estimate, mean_se, proportion_interval, task_intervals

_LAZY = {
    "CompareOptions": "codegym.evals.compare",
    "CompareResult": "codegym.evals.compare",
    "CostDelta": "codegym.evals.compare",
    "Estimate": "codegym.evals.stats",
    "PowerPlan": "codegym.evals.power",
    "Run": "codegym.evals.runs",
    "RunError": "codegym.evals.runs",
    "SequentialMonitor": "codegym.evals.sequential",
    "compare": "codegym.evals.compare",
    "compare_runs": "codegym.evals.compare",
    "compare_suites": "codegym.evals.compare",
    "confidence_sequence": "codegym.evals.sequential",
    "estimate": "codegym.evals.stats",
    "load_run": "codegym.evals.runs",
    "mean_se": "codegym.evals.stats",
    "pass_at_k": "codegym.evals.passk",
    "plan": "codegym.evals.power",
    "predicted_power": "codegym.evals.power",
    "proportion_interval": "codegym.evals.stats",
    "simulate_savings": "codegym.evals.sequential",
    "summarize": "codegym.evals.passk",
    "task_intervals": "codegym.evals.stats",
    "variance_components": "codegym.evals.power",
    "wilson_interval": "codegym.evals.passk",
}


__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "CompareOptions",
    "CompareResult",
    "CostDelta",
    "Estimate",
    "PowerPlan",
    "Run",
    "RunError",
    "SequentialMonitor",
    "compare",
    "compare_runs",
    "compare_suites",
    "confidence_sequence",
    "estimate",
    "load_run",
    "mean_se",
    "pass_at_k",
    "plan",
    "predicted_power",
    "proportion_interval",
    "simulate_savings",
    "summarize",
    "task_intervals",
    "variance_components",
    "wilson_interval",
]
