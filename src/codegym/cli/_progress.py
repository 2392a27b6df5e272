"""A live progress bar for scoring: pass rate, throughput and outcome counts."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codegym.cli._common import console
from codegym.evals.runner import SampleResult
from codegym.tasks import is_infra


class ScoreProgress:
    """Counts outcomes as results arrive and shows them on one line."""

    def __init__(self, bar: Progress, total: int) -> None:
        self._bar = bar
        self._job = bar.add_task("score", total=total, stats="")
        self._start = time.monotonic()
        self.counts: Counter[str] = Counter()
        self.passed = 0

    def __call__(self, r: SampleResult) -> None:
        self.counts[r.outcome] += 1
        self.passed += r.passed
        done = sum(self.counts.values())
        scored = sum(v for k, v in self.counts.items() if not is_infra(k))
        rate = f"pass {self.passed / scored:.1%}" if scored else "pass -"
        speed = done / max(1e-9, time.monotonic() - self._start)
        self._bar.update(
            self._job,
            advance=1,
            stats=f"{rate}  {speed:.0f}/s  "
            + " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())),
        )


def stats_bar(label: str, quiet: bool) -> Progress:
    """A progress bar with a free-form ``stats`` field after the count."""
    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )


@contextmanager
def score_progress(total: int, label: str, quiet: bool) -> Iterator[ScoreProgress]:
    with stats_bar(label, quiet) as bar:
        yield ScoreProgress(bar, total)
