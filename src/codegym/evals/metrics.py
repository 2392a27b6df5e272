"""Eval metrics beyond pass@k, by name: ``--metric NAME`` adds one to ``summary.json``.

A metric is a function of a run's scored samples that returns a JSON-able dict; it is one
file and one registration, ``METRICS.register("mine", "my_package.my_metric:metric")``
(imported on first use). ``build_summary(..., metrics=["mine"])`` writes its result under
``summary["metrics"]["mine"]``; an unknown name is refused, naming the registered ones.
docs/extending.md has a whole example.

Built in: ``latency`` (model and sandbox time per sample, median and 95th percentile) and
``tokens`` (prompt and completion tokens per sample). Infra samples are left out of
both, as they are left out of every statistic.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from codegym._registry import Registry
from codegym.tasks import is_infra

if TYPE_CHECKING:
    from codegym.evals.runner import SampleResult

Metric = Callable[[Sequence["SampleResult"]], dict[str, Any]]

METRICS: Registry[Metric] = Registry(
    "eval metric", "add one with codegym.evals.metrics.METRICS.register(name, 'module:function')"
)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return {"p50": round(statistics.median(ordered), 4), "p95": round(p95, 4)}


@METRICS.plugin("latency")
def latency(results: Sequence[SampleResult]) -> dict[str, Any]:
    """Seconds per sample: the model's answer and the sandbox's run."""
    scored = [r for r in results if not is_infra(r.outcome)]
    return {
        "model_s": _quantiles([r.model_s for r in scored if r.model_s is not None]),
        "sandbox_wall_s": _quantiles([r.wall_s for r in scored if r.wall_s is not None]),
        "sandbox_cpu_s": _quantiles([r.cpu_s for r in scored if r.cpu_s is not None]),
    }


@METRICS.plugin("tokens")
def tokens(results: Sequence[SampleResult]) -> dict[str, Any]:
    """Mean prompt and completion tokens per scored sample (None when the server said none)."""
    scored = [r for r in results if not is_infra(r.outcome)]
    ins = [r.tokens_in for r in scored if r.tokens_in is not None]
    outs = [r.tokens_out for r in scored if r.tokens_out is not None]
    return {
        "tokens_in_mean": round(statistics.fmean(ins), 2) if ins else None,
        "tokens_out_mean": round(statistics.fmean(outs), 2) if outs else None,
        "samples": len(scored),
    }


def compute(names: Sequence[str], results: Sequence[SampleResult]) -> dict[str, Any]:
    """Every named metric of ``results``.

    Raises:
        UnknownName: a name no metric is registered under.
    """
    return {name: METRICS.get(name)(results) for name in names}
