"""Evaluation: pass@k, statistics, comparisons and reports."""

from codegym.evals.passk import pass_at_k, summarize, wilson_interval

__all__ = ["pass_at_k", "summarize", "wilson_interval"]
