"""What is in flight, in which stage, since when; the watchdog; the circuit breaker.

The tracker is a dict update per stage change (cheap enough for every episode). The
watchdog wakes every ``watchdog_s / 4`` and, when no episode finished for ``watchdog_s``,
logs a report: counts per stage and the oldest episodes with their stage and age, so a
stalled run says which stage holds it. The breaker counts consecutive failed attempts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger("codegym.rollout")


@dataclass
class _Entry:
    task_id: str
    stage: str
    since: float
    started: float


class EpisodeTracker:
    """In-flight episodes by id: current stage and when it began."""

    def __init__(self) -> None:
        self._live: dict[str, _Entry] = {}
        self.last_finish = time.monotonic()
        self.reports: list[str] = []
        """Every watchdog report, oldest first (tests and post-mortems read them)."""

    def start(self, eid: str, task_id: str) -> None:
        now = time.monotonic()
        self._live[eid] = _Entry(task_id, "queued", now, now)

    def stage(self, eid: str, stage: str) -> None:
        e = self._live.get(eid)
        if e is not None:
            e.stage, e.since = stage, time.monotonic()

    def finish(self, eid: str) -> None:
        self._live.pop(eid, None)
        self.last_finish = time.monotonic()

    def __len__(self) -> int:
        return len(self._live)

    def report(self, top: int = 10) -> str:
        now = time.monotonic()
        stages = Counter(e.stage for e in self._live.values())
        oldest = sorted(self._live.items(), key=lambda kv: kv[1].since)[:top]
        lines = [
            f"no episode finished for {now - self.last_finish:.1f} s; "
            f"{len(self._live)} in flight by stage: "
            + ", ".join(f"{s}={n}" for s, n in stages.most_common())
        ]
        lines += [
            f"  {eid} task={e.task_id} stage={e.stage} for {now - e.since:.1f} s "
            f"(episode age {now - e.started:.1f} s)"
            for eid, e in oldest
        ]
        return "\n".join(lines)

    async def watchdog(self, period_s: float) -> None:
        """Runs until cancelled; logs a report whenever progress stalls for ``period_s``."""
        reported_at = 0.0
        while True:
            await asyncio.sleep(period_s / 4)
            now = time.monotonic()
            if self._live and now - self.last_finish >= period_s and now - reported_at >= period_s:
                text = self.report()
                self.reports.append(text)
                log.warning("rollout watchdog: %s", text)
                reported_at = now


class CircuitBreaker:
    """Trips after ``threshold`` consecutive failed attempts; any success resets it."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.consecutive = 0
        self.recent: Counter[str] = Counter()
        self.last_detail = ""
        self.tripped = False

    def success(self) -> None:
        self.consecutive = 0
        self.recent.clear()

    def failure(self, reason: str, detail: str) -> bool:
        """Record a failure; True when the breaker trips now."""
        self.consecutive += 1
        self.recent[reason] += 1
        self.last_detail = detail
        if not self.tripped and self.consecutive >= self.threshold:
            self.tripped = True
            return True
        return False

    def diagnosis(self) -> str:
        kinds = ", ".join(f"{k} ×{n}" for k, n in self.recent.most_common())
        return (
            f"stopped after {self.consecutive} failed episode attempts in a row ({kinds}); "
            f"last: {self.last_detail[:300]}. Check the model server and the sandbox, "
            "or raise --breaker-threshold if failures are expected."
        )
