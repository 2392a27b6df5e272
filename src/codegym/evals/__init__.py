"""Evaluation: pass@k, statistics, comparisons and reports."""

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
