"""Evaluation: pass@k, statistics, comparisons and reports.

Names load on first use (PEP 562): the statistics pull in scipy and statsmodels, which a
command that only scores samples should not pay for at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegym._lazy import lazy_package

if TYPE_CHECKING:  # what type checkers see; held to _LAZY by tests/test_exported_members.py
    from codegym.evals.compare import CompareOptions as CompareOptions
    from codegym.evals.compare import CompareResult as CompareResult
    from codegym.evals.compare import CostDelta as CostDelta
    from codegym.evals.compare import compare as compare
    from codegym.evals.compare import compare_runs as compare_runs
    from codegym.evals.compare import compare_suites as compare_suites
    from codegym.evals.passk import pass_at_k as pass_at_k
    from codegym.evals.passk import summarize as summarize
    from codegym.evals.passk import wilson_interval as wilson_interval
    from codegym.evals.power import PowerPlan as PowerPlan
    from codegym.evals.power import plan as plan
    from codegym.evals.power import predicted_power as predicted_power
    from codegym.evals.power import variance_components as variance_components
    from codegym.evals.runs import Run as Run
    from codegym.evals.runs import RunError as RunError
    from codegym.evals.runs import load_run as load_run
    from codegym.evals.sequential import SequentialMonitor as SequentialMonitor
    from codegym.evals.sequential import confidence_sequence as confidence_sequence
    from codegym.evals.sequential import simulate_savings as simulate_savings
    from codegym.evals.stats import Estimate as Estimate
    from codegym.evals.stats import estimate as estimate
    from codegym.evals.stats import mean_se as mean_se
    from codegym.evals.stats import proportion_interval as proportion_interval
    from codegym.evals.stats import task_intervals as task_intervals

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

__getattr__, __dir__, __all__ = lazy_package(__name__, _LAZY)
