"""Ground truth: prove every task's reference passes its own tests, and size its CPU limit.

``verify`` scores each task's reference ``repeats`` times in the sandbox and sorts the
tasks:

- **kept**: every run passed. The task gets ``limits`` whose ``cpu_s`` is
  ``max(floor_cpu_s, factor × median reference CPU seconds)``; memory, output and the other
  limits come from the base limits (``base_limits``, else the task's own, else
  ``DEFAULT_LIMITS``), and the wall backstop is raised when the new CPU limit needs it.
- **quarantined**, with the reason: ``fails`` (no run passed: the first failure's outcome
  and detail), ``flaky`` (some runs passed, some did not), ``no_reference`` (nothing to run),
  or ``infra`` (the sandbox kept failing, so the reference could not be judged).

A sandbox ``infra`` outcome is not the reference's fault: the run is retried up to
``infra_retries`` times; only if every retry fails too is the task set aside as ``infra``.
A quarantined task's results are the infra outcome ``broken_ground_truth``, never a model
failure (``codegym.tasks.outcomes``).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from codegym.sandbox import Limits
from codegym.sandbox.api import SandboxAPI
from codegym.tasks.scoring import DEFAULT_LIMITS, Score, score
from codegym.tasks.task import Task, TaskError
from codegym.tasks.taskset import TaskSet

QuarantineKind = Literal["fails", "flaky", "no_reference", "infra"]


@dataclass(frozen=True)
class Quarantined:
    """A task set aside because its reference cannot be trusted (or judged)."""

    id: str
    kind: QuarantineKind
    """``fails``, ``flaky``, ``no_reference`` or ``infra`` (see the module docstring)."""
    reason: str
    """One line for people: the outcome and the sandbox's detail."""
    outcomes: tuple[str, ...]
    """The outcome of each run, in order (after infra retries)."""


@dataclass(frozen=True)
class GroundTruthReport:
    """What ``verify`` found."""

    kept: TaskSet
    """The tasks whose reference passed every run, with measured ``limits``."""
    quarantined: tuple[Quarantined, ...]
    """The others, in input order."""
    ref_cpu_s: dict[str, float] = field(compare=False)
    """Median reference CPU seconds per kept task."""
    wall_s: float = 0.0
    """Wall seconds ``verify`` took."""
    runs: int = 0
    """Sandbox runs made, retries included."""
    infra_retries: int = 0
    """Runs repeated because the sandbox failed."""

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (counts, quarantine list, CPU-time distribution)."""
        cpu = sorted(self.ref_cpu_s.values())
        return {
            "kept": len(self.kept),
            "quarantined": [
                {"id": q.id, "kind": q.kind, "reason": q.reason, "outcomes": list(q.outcomes)}
                for q in self.quarantined
            ],
            "by_kind": dict(Counter(q.kind for q in self.quarantined)),
            "runs": self.runs,
            "infra_retries": self.infra_retries,
            "wall_s": round(self.wall_s, 3),
            "ref_cpu_s": {
                "median": statistics.median(cpu) if cpu else None,
                "max": cpu[-1] if cpu else None,
            },
        }


@dataclass
class _Tally:
    runs: int = 0
    retries: int = 0


async def verify(
    sandbox: SandboxAPI,
    tasks: Iterable[Task],
    *,
    repeats: int = 3,
    floor_cpu_s: float = 1.0,
    factor: float = 5.0,
    base_limits: Limits | None = None,
    infra_retries: int = 2,
    concurrency: int | None = None,
) -> GroundTruthReport:
    """Run every reference ``repeats`` times; keep the sound tasks with measured limits.

    Args:
        tasks: a ``TaskSet`` (its name, sha256 and source carry over to ``kept``) or tasks.
        repeats: runs per reference; more catches rarer flakes.
        floor_cpu_s, factor: the CPU limit is ``max(floor_cpu_s, factor × median)``.
        base_limits: limits for the reference runs and the base of the new limits
            (default: each task's own, else ``DEFAULT_LIMITS``).
        infra_retries: extra attempts for a run the sandbox failed.
        concurrency: runs in flight (default: twice the sandbox's workers).

    Raises:
        TaskError: a non-positive ``repeats``, ``factor`` or ``floor_cpu_s``.
    """
    if repeats < 1 or factor <= 0 or floor_cpu_s <= 0 or infra_retries < 0:
        raise TaskError(
            f"verify: repeats={repeats}, factor={factor}, floor_cpu_s={floor_cpu_s}, "
            f"infra_retries={infra_retries}: use repeats >= 1, factor > 0, floor > 0, "
            "retries >= 0"
        )
    task_list = list(tasks)
    start = time.perf_counter()
    gate = asyncio.Semaphore(concurrency or 2 * sandbox.size)
    tally = _Tally()

    async def one_run(task: Task, limits: Limits) -> Score:
        async with gate:
            for attempt in range(infra_retries + 1):
                tally.runs += 1
                s = await score(sandbox, task, task.reference, limits=limits)
                if s.outcome != "infra":
                    return s
                if attempt < infra_retries:
                    tally.retries += 1
            return s

    async def one_task(task: Task) -> list[Score]:
        if not task.reference.strip():
            return []
        limits = _base(task, base_limits)
        return list(await asyncio.gather(*(one_run(task, limits) for _ in range(repeats))))

    async with asyncio.TaskGroup() as tg:
        jobs = [tg.create_task(one_task(t)) for t in task_list]

    kept: list[Task] = []
    quarantined: list[Quarantined] = []
    ref_cpu: dict[str, float] = {}
    for task, job in zip(task_list, jobs, strict=True):
        scores = job.result()
        verdict = _judge(task, scores)
        if verdict is not None:
            quarantined.append(verdict)
            continue
        median_cpu = statistics.median(s.cpu_s for s in scores)
        ref_cpu[task.id] = median_cpu
        kept.append(
            replace(
                task, limits=sized_limits(_base(task, base_limits), median_cpu, floor_cpu_s, factor)
            )
        )
    if isinstance(tasks, TaskSet):
        kept_set = TaskSet(tasks.name, tuple(kept), sha256=tasks.sha256, source=tasks.source)
    else:
        kept_set = TaskSet("verified", tuple(kept))
    return GroundTruthReport(
        kept=kept_set,
        quarantined=tuple(quarantined),
        ref_cpu_s=ref_cpu,
        wall_s=time.perf_counter() - start,
        runs=tally.runs,
        infra_retries=tally.retries,
    )


def sized_limits(base: Limits, ref_cpu_s: float, floor_cpu_s: float, factor: float) -> Limits:
    """``base`` with ``cpu_s = max(floor, factor × ref_cpu_s)`` (capped at Limits' maximum).

    An explicit wall backstop is kept unless the new CPU limit needs a longer one. The limit
    is rounded up to a whole second: the kernel's RLIMIT_CPU counts whole seconds anyway,
    and a stable limit keeps the task's digest (and so every cached score) stable across
    runs whose measured reference time jitters.
    """
    cpu = float(math.ceil(min(3600.0, max(floor_cpu_s, factor * ref_cpu_s))))
    # Limits allows a wall backstop of at most 7200 s.
    wall = None if base.wall_s is None else min(7200.0, max(base.wall_s, Limits(cpu_s=cpu).wall))
    return replace(base, cpu_s=cpu, wall_s=wall)


def _base(task: Task, base_limits: Limits | None) -> Limits:
    return base_limits or task.limits or DEFAULT_LIMITS


def _judge(task: Task, scores: list[Score]) -> Quarantined | None:
    """None when the reference is sound; otherwise why it is not."""
    outcomes = tuple(s.outcome for s in scores)
    if not scores:
        return Quarantined(task.id, "no_reference", "the task has no reference solution", ())
    if all(s.passed for s in scores):
        return None
    infra = [s for s in scores if s.outcome == "infra"]
    if infra:
        # Judge nothing from a partial picture: the sandbox, not the reference, failed.
        return Quarantined(
            task.id, "infra", f"sandbox failed after retries: {infra[0].detail}", outcomes
        )
    failed = [s for s in scores if not s.passed]
    first = failed[0]
    if len(failed) == len(scores):
        return Quarantined(
            task.id, "fails", f"reference {first.outcome}: {_one_line(first.detail)}", outcomes
        )
    return Quarantined(
        task.id,
        "flaky",
        f"reference passed {len(scores) - len(failed)} of {len(scores)} runs; "
        f"a failing run: {first.outcome}: {_one_line(first.detail)}",
        outcomes,
    )


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    # The last line of a traceback names the exception; it says the most in one line.
    line = lines[-1] if lines else "(no detail)"
    return line if len(line) <= limit else line[: limit - 3] + "..."
