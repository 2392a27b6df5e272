"""A run folder: ``results.jsonl`` (one row per sample) and ``summary.json``.

``summary.json`` holds the sample counts (``requested``, ``scored``, ``excluded`` by reason),
pass@k with confidence intervals, outcome counts, cost and time totals, the flaky samples,
the run's configuration, and ``status``: ``ok``, or ``too_many_infra`` when infra outcomes
exceed the threshold (the CLI then exits non-zero with a diagnosis).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from codegym.evals.passk import summarize
from codegym.evals.runner import SampleResult
from codegym.store import RunItem, Store, content_key


def build_summary(
    results: Sequence[SampleResult],
    *,
    seconds: float,
    config: dict[str, Any],
    ks: Sequence[int] = (1, 10, 100),
    max_infra_fraction: float = 0.05,
    metrics: Sequence[str] = (),
) -> dict[str, Any]:
    """The run's ``summary.json``: pass@k with clustered intervals, outcomes, infra, cost,
    and the registered ``metrics`` asked for (``codegym.evals.metrics``)."""
    # counts here; pass@k and its clustered interval once, in _pass_at_k (not an estimate
    # computed here and then overwritten there)
    summary = summarize([r.task_id for r in results], results, ks=())
    summary["pass_at_k"] = _pass_at_k(results, ks)
    n = len(results)
    infra = sum(v for k, v in summary["excluded_by_reason"].items() if k != "flaky")
    summary["infra_fraction"] = round(infra / n, 4) if n else 0.0
    summary["status"] = "ok"
    if n and infra / n > max_infra_fraction:
        summary["status"] = "too_many_infra"
        reasons = Counter(r.detail.split(":")[0][:80] for r in results if r.outcome == "infra")
        summary["diagnosis"] = (
            f"{infra} of {n} samples ({infra / n:.1%}) hit infrastructure failures "
            f"(threshold {max_infra_fraction:.0%}); by kind: {summary['excluded_by_reason']}; "
            f"top sandbox reasons: {dict(reasons.most_common(3))}"
        )
    summary["flaky"] = sorted({f"{r.task_id}#{r.sample_index}" for r in results if r.flaky})
    summary["cached"] = sum(r.cached for r in results)
    summary["seconds"] = round(seconds, 3)
    summary["samples_per_s"] = round(n / seconds, 1) if seconds > 0 else None
    summary["cost"] = {
        "tokens_in": sum(r.tokens_in or 0 for r in results),
        "tokens_out": sum(r.tokens_out or 0 for r in results),
        "model_s": round(sum(r.model_s or 0.0 for r in results), 3),
        "sandbox_cpu_s": round(sum(r.cpu_s or 0.0 for r in results), 3),
        "sandbox_wall_s": round(sum(r.wall_s or 0.0 for r in results), 3),
    }
    if metrics:
        from codegym.evals.metrics import compute

        summary["metrics"] = compute(metrics, results)
    summary["config"] = config
    return summary


def _pass_at_k(results: Sequence[SampleResult], ks: Sequence[int]) -> dict[str, Any]:
    """pass@k for each k with the interval of ``evals.stats.estimate`` (clustered by each
    task's cluster label, Wilson/exact for a single task), so ``summary.json``, ``compare``
    and the report quote one interval for one number. A k some task has fewer samples
    for, or a run with nothing scored, is left out (no number without its error bar)."""
    from codegym.evals.runs import Run, RunError
    from codegym.evals.stats import estimate

    try:
        run = Run.from_rows((r.row() for r in results), name="summary")
    except RunError:
        return {}  # nothing scored: no estimate, so no pass@k
    out: dict[str, Any] = {}
    for k in ks:
        try:
            est = estimate(run, int(k))
        except RunError:  # a task with fewer than k samples: no pass@k
            continue
        out[str(k)] = {
            "estimate": est.mean,
            "tasks": run.n_tasks,
            "ci_low": est.ci_low,
            "ci_high": est.ci_high,
            "method": est.method,
        }
    return out


def record_run(
    store: Store, run_id: str, kind: str, config: dict[str, Any], results: Sequence[SampleResult]
) -> None:
    """List the run's samples in the store (in order, pointing at their records by key), so
    ``Store.export`` and later tools can read the run back without the run folder."""
    store.begin_run(run_id, kind, config)
    store.add_run_items(
        run_id,
        [
            RunItem(
                ordinal=i,
                task_id=r.task_id,
                sample_index=r.sample_index,
                cluster=r.cluster,
                generation_key=r.generation_key,
                score_key=r.score_key,
                # Without a stored generation the completion lives only here.
                sample=r.fields if r.generation_key else {**r.fields, "completion": r.completion},
            )
            for i, r in enumerate(results)
        ],
    )
    store.finish_run(run_id)


def export_run(store: Store, run_id: str, url: str) -> int:
    """Export a recorded run to ``url``: Parquet unless the URL ends in ``.jsonl``."""
    fmt: Literal["parquet", "jsonl"] = "jsonl" if url.endswith(".jsonl") else "parquet"
    return store.export(run_id, url, fmt)


def run_id_for(config: dict[str, Any]) -> str:
    """A run's id: the content key of its configuration (same config, same run)."""
    return content_key("run", config=config)[:24]


def write_run(out: Path, results: Sequence[SampleResult], summary: dict[str, Any]) -> None:
    """Write ``results.jsonl`` and ``summary.json`` atomically (rename over the old ones)."""
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.jsonl", "".join(json.dumps(r.row()) + "\n" for r in results))
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
