"""What a report needs from one run folder, beyond the collapsed :class:`Run`.

The statistics work on :class:`codegym.evals.runs.Run` (infra and flaky samples dropped). A
report also shows what the statistics leave out: every outcome by kind (model vs infra), the
flaky samples per task, and per-task sandbox time. :func:`load_view` reads the rows once and
builds both.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegym.evals.runs import Run, RunError, read_rows
from codegym.tasks.outcomes import INFRA_OUTCOMES


@dataclass(frozen=True)
class TaskTime:
    """Mean sandbox time per sample of one task."""

    task_id: str
    samples: int
    cpu_s: float | None
    wall_s: float | None


@dataclass(frozen=True)
class TaskFlaky:
    """Samples of one task whose verdict changed on re-execution."""

    task_id: str
    flaky: int
    samples: int


@dataclass(frozen=True)
class RunView:
    """One run as a report shows it."""

    label: str
    """Short name for tables and legends."""
    path: str
    run: Run
    """Collapsed per task; the input of every statistic."""
    model: str | None
    """``config.model`` of summary.json, when the run was sampled from a model."""
    suite: str | None
    outcomes: Mapping[str, int]
    """Every outcome (model and infra) -> samples, over all rows."""
    times: tuple[TaskTime, ...]
    flaky: tuple[TaskFlaky, ...]
    summary: Mapping[str, Any]

    @property
    def infra_total(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k in INFRA_OUTCOMES)


def load_view(path: str | Path, label: str | None = None) -> RunView:
    """Read a run folder (or a results.jsonl). Raises RunError naming the file and the fix."""
    p = Path(path)
    results = p / "results.jsonl" if p.is_dir() else p
    if p.is_dir() and not results.exists():
        raise RunError(f"{p}: run folder without results.jsonl")
    rows = read_rows(results)
    run = Run.from_rows(rows, name=str(path))
    summary = _read_summary(results.parent / "summary.json") if p.is_dir() else {}
    config = summary.get("config")
    config = config if isinstance(config, dict) else {}
    model, suite = config.get("model"), config.get("suite")
    return RunView(
        label=label or (p.name if p.is_dir() else p.stem),
        path=str(p),
        run=run,
        model=model if isinstance(model, str) else None,
        suite=suite if isinstance(suite, str) else None,
        outcomes=dict(
            Counter(
                str(r.get("outcome", "pass" if r.get("passed") else "fail")) for r in rows
            ).most_common()
        ),
        times=_times(rows),
        flaky=_flaky(rows),
        summary=summary,
    )


def unique_labels(paths: Sequence[str | Path]) -> list[str]:
    """Folder names, or the paths themselves when two folders share a name."""
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def _read_summary(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RunError(f"{path}: unreadable summary.json ({e}); fix or delete it") from None
    return data if isinstance(data, dict) else {}


def _num(v: object) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _times(rows: Sequence[Mapping[str, Any]]) -> tuple[TaskTime, ...]:
    cpu: dict[str, list[float]] = defaultdict(list)
    wall: dict[str, list[float]] = defaultdict(list)
    count: Counter[str] = Counter()
    for r in rows:
        tid = str(r["task_id"])
        count[tid] += 1
        if (c := _num(r.get("cpu_s"))) is not None:
            cpu[tid].append(c)
        if (w := _num(r.get("wall_s"))) is not None:
            wall[tid].append(w)
    out = [
        TaskTime(
            t,
            count[t],
            sum(cpu[t]) / len(cpu[t]) if cpu[t] else None,
            sum(wall[t]) / len(wall[t]) if wall[t] else None,
        )
        for t in count
        if cpu[t] or wall[t]
    ]
    return tuple(out)


def _flaky(rows: Sequence[Mapping[str, Any]]) -> tuple[TaskFlaky, ...]:
    flaky: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for r in rows:
        tid = str(r["task_id"])
        count[tid] += 1
        if r.get("flaky") is True:
            flaky[tid] += 1
    return tuple(TaskFlaky(t, f, count[t]) for t, f in flaky.items())
