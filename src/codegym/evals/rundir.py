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
from typing import Any

from codegym.evals.passk import summarize
from codegym.evals.runner import SampleResult


def build_summary(
    results: Sequence[SampleResult],
    *,
    seconds: float,
    config: dict[str, Any],
    ks: Sequence[int] = (1, 10, 100),
    max_infra_fraction: float = 0.05,
) -> dict[str, Any]:
    summary = summarize([r.task_id for r in results], results, ks)
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
    summary["config"] = config
    return summary


def write_run(out: Path, results: Sequence[SampleResult], summary: dict[str, Any]) -> None:
    """Write ``results.jsonl`` and ``summary.json`` atomically (rename over the old ones)."""
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.jsonl", "".join(json.dumps(r.row()) + "\n" for r in results))
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
