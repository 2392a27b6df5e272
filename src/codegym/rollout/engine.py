"""The rollout engine: GRPO groups streamed to a trainer, with every episode accounted for.

    engine = RolloutEngine(LocalExecutor(EnvSpec("code"), policy, params, resources), config)
    async for group in engine.run(tasks):      # one group per task, in completion order
        trainer.step(group.trajectories)
    engine.stats.summary()                     # requested, scored, excluded by reason

Contract:
- **Groups** are the unit: ``group_size`` episodes of one task. A group is yielded when each
  of its episodes is either scored (a ``Trajectory`` with a model outcome) or excluded (an
  ``Exclusion`` with a reason). ``requested == scored + sum(excluded)`` at the end; no
  episode is yielded twice.
- **Admission and back-pressure**: at most ``groups_in_flight`` groups run, and at most
  ``model_concurrency`` *episodes*: a group is admitted when ``group_size`` episode slots
  are free, and each episode gives its slot back as soon as it is resolved, so a group
  waiting on one slow episode does not keep its other slots idle (with 10% of model calls
  failing most groups hold a retried episode; per-group slots gave 0.58 of the fault-free
  rate in ``benchmarks/rollout_bench.py``, episode slots 0.78). A
  finished group waits in a queue of ``buffer_groups`` for the consumer, holding its group
  slot, so a slow trainer pauses new rollouts instead of growing a queue. Model calls and
  env steps have their own concurrency bounds (in the executor).
- **Faults**: an attempt that fails for an infra reason is retried ``retries`` times with
  jittered exponential backoff, then the episode is excluded with that reason (never a
  reward of 0). Attempt failures are counted per env and reason. ``breaker_threshold``
  failed attempts in a row stop the run: in-flight groups are cancelled, their episodes
  counted as ``aborted``, and the iterator raises ``RolloutAborted`` with a diagnosis.
- **Stragglers**: once ``straggler_quorum`` of a group is done, the rest get
  ``straggler_s`` seconds; then they are cancelled and resampled once, or dropped
  (``straggler``).
- **Staleness**: a group whose oldest turn is more than ``max_staleness`` policy versions
  behind ``executor.current_version()`` is regenerated (up to ``max_regenerations``) or its
  episodes are excluded as ``stale``.
- **Watchdog**: see ``tracker.EpisodeTracker.watchdog``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

from codegym.envs.trajectory import Trajectory
from codegym.rollout.config import Exclusion, Group, RolloutAborted, RolloutConfig
from codegym.rollout.executor import EpisodeFailure, EpisodeRequest, Executor
from codegym.rollout.tracker import CircuitBreaker, EpisodeTracker
from codegym.tasks import Task
from codegym.telemetry import metrics as _metrics

log = logging.getLogger("codegym.rollout")
Slot = Trajectory | Exclusion


class RolloutStats:
    """Counts that make every episode accountable."""

    def __init__(self) -> None:
        self.requested = 0
        self.scored = 0
        self.excluded: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        """Failed attempts by ``env/reason`` (retried ones included)."""
        self.retries = 0
        self.stragglers = 0
        """Attempts cancelled at a straggler deadline."""
        self.resampled = 0
        self.regenerated = 0
        """Scored episodes thrown away because their group was regenerated as stale."""
        self.groups = 0
        self.rewards_sum = 0.0
        self.started = time.monotonic()
        self.finished: float | None = None

    def summary(self) -> dict[str, Any]:
        seconds = (self.finished or time.monotonic()) - self.started
        return {
            "requested": self.requested,
            "scored": self.scored,
            "excluded": dict(sorted(self.excluded.items())),
            "excluded_total": sum(self.excluded.values()),
            "groups": self.groups,
            "faults": dict(sorted(self.faults.items())),
            "retries": self.retries,
            "stragglers": self.stragglers,
            "resampled": self.resampled,
            "regenerated": self.regenerated,
            "mean_reward": self.rewards_sum / self.scored if self.scored else None,
            "seconds": round(seconds, 3),
            "episodes_per_s": round(self.scored / seconds, 2) if seconds > 0 else None,
        }


class RolloutEngine:
    """Streams GRPO groups from an executor (see the module docstring for the contract)."""

    def __init__(
        self, executor: Executor, config: RolloutConfig | None = None, env: str = "env"
    ) -> None:
        self.executor = executor
        self.config = config or RolloutConfig()
        self.env = env
        self.stats = RolloutStats()
        self.tracker = EpisodeTracker()
        self.breaker = CircuitBreaker(self.config.breaker_threshold)
        self._groups: set[asyncio.Task[None]] = set()
        self._rng = random.Random(self.config.seed)
        self._slots = _Slots(max(self.config.model_concurrency, self.config.group_size))

    async def run(self, tasks: Iterable[Task] | AsyncIterable[Task]) -> AsyncIterator[Group]:
        """One group per task (repeat a task for more groups), yielded as they finish.

        Raises:
            RolloutAborted: the circuit breaker tripped (after yielding what finished).
        """
        cfg = self.config
        out: asyncio.Queue[Group | None] = asyncio.Queue(maxsize=cfg.buffer_groups)
        admit = asyncio.Semaphore(cfg.groups_in_flight)
        self._slots = _Slots(max(cfg.model_concurrency, cfg.group_size))
        producer = asyncio.create_task(self._produce(tasks, admit, out))
        watchdog = asyncio.create_task(self.tracker.watchdog(cfg.watchdog_s))
        try:
            while True:
                group = await out.get()
                if group is None:
                    break
                yield group
            await producer  # re-raises a producer failure (e.g. the task iterable raised)
        finally:
            watchdog.cancel()
            if not producer.done():
                producer.cancel()
                self._cancel_groups()
                await asyncio.gather(producer, return_exceptions=True)
            self.stats.finished = time.monotonic()
        if self.breaker.tripped:
            raise RolloutAborted(self.breaker.diagnosis())

    async def _produce(
        self,
        tasks: Iterable[Task] | AsyncIterable[Task],
        admit: asyncio.Semaphore,
        out: asyncio.Queue[Group | None],
    ) -> None:
        seen: Counter[str] = Counter()
        try:
            async with asyncio.TaskGroup() as tg:
                async for task in _aiter(tasks):
                    await admit.acquire()
                    await self._slots.acquire(self.config.group_size)
                    if self.breaker.tripped:
                        admit.release()
                        self._slots.release(self.config.group_size)
                        break
                    gid = f"{task.id}#{seen[task.id]}"
                    seen[task.id] += 1
                    self.stats.requested += self.config.group_size
                    t = tg.create_task(self._group(task, gid, admit, out))
                    self._groups.add(t)
                    t.add_done_callback(self._groups.discard)
        finally:
            await out.put(None)

    def _cancel_groups(self) -> None:
        for t in list(self._groups):
            t.cancel()

    async def _group(
        self, task: Task, gid: str, admit: asyncio.Semaphore, out: asyncio.Queue[Group | None]
    ) -> None:
        try:
            group = await self._run_group(task, gid)
            await out.put(group)
        finally:
            admit.release()

    async def _run_group(self, task: Task, gid: str) -> Group:
        cfg = self.config
        regen = 0
        slots: list[Slot | None] = [None] * cfg.group_size
        try:
            while True:
                slots = [None] * cfg.group_size
                if regen:  # the first round's slots were taken at admission
                    await self._slots.acquire(cfg.group_size)
                await self._collect(task, gid, slots, regen)
                done = [s for s in slots if s is not None]
                trajs = [s for s in done if isinstance(s, Trajectory)]
                if cfg.max_staleness is not None and trajs:
                    versions = [v for t in trajs for v in t.policy_versions]
                    lag = self.executor.current_version() - min(versions) if versions else 0
                    if lag > cfg.max_staleness:
                        if cfg.stale_policy == "regenerate" and regen < cfg.max_regenerations:
                            regen += 1
                            self.stats.regenerated += len(trajs)
                            continue
                        why = f"policy version lag {lag} > max_staleness {cfg.max_staleness}"
                        done = [
                            Exclusion(s.index, "stale", why, s.attempt + 1)
                            if isinstance(s, Trajectory)
                            else s
                            for s in done
                        ]
                        trajs = []
                break
        except asyncio.CancelledError:
            # Aborted or the consumer left: every unresolved episode still gets a reason.
            for _i, s in enumerate(slots):
                if s is None or isinstance(s, Trajectory):
                    self.stats.excluded["aborted"] += 1
                elif isinstance(s, Exclusion):
                    self.stats.excluded[s.reason] += 1
            raise
        excluded = tuple(s for s in done if isinstance(s, Exclusion))
        for e in excluded:
            self.stats.excluded[e.reason] += 1
            _metrics.rollout_infra_error(self.env, e.reason)
        now = self.executor.current_version()
        for t in trajs:  # telemetry: episodes by outcome, staleness, the time each stage took
            behind = now - min(t.policy_versions) if t.policy_versions else None
            _metrics.record_episode(self.env, t.outcome, staleness=behind)
            for stage, seconds in t.timings.items():
                if stage in _metrics.STAGES:
                    _metrics.observe_stage(stage, seconds, env=self.env)
        self.stats.scored += len(trajs)
        self.stats.rewards_sum += sum(t.reward or 0.0 for t in trajs)
        self.stats.groups += 1
        return Group(gid, task, tuple(trajs), excluded, regen)

    async def _collect(self, task: Task, gid: str, slots: list[Slot | None], regen: int) -> None:
        cfg = self.config
        n = cfg.group_size
        base_attempt = regen * (cfg.retries + 2)
        pending: dict[asyncio.Task[Slot], int] = {}
        resampled: set[int] = set()

        def start(i: int, attempt: int) -> None:
            pending[asyncio.create_task(self._episode(task, gid, i, attempt))] = i

        for i in range(n):
            start(i, base_attempt)
        held = n  # episode slots this round holds; each resolved episode gives one back

        quorum = math.ceil(cfg.straggler_quorum * n)
        deadline: float | None = None
        try:
            while pending:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait(
                    pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for t in done:
                    slots[pending.pop(t)] = t.result()
                self._slots.release(len(done))
                held -= len(done)
                resolved = sum(s is not None for s in slots)
                now = time.monotonic()
                if cfg.straggler_s is not None and deadline is None and resolved >= quorum:
                    deadline = now + cfg.straggler_s
                if deadline is not None and now >= deadline and pending:
                    late = list(pending.items())
                    pending.clear()
                    for t, _ in late:
                        t.cancel()
                    await asyncio.gather(*(t for t, _ in late), return_exceptions=True)
                    self.stats.stragglers += len(late)
                    for _, i in late:
                        if cfg.straggler_policy == "resample" and i not in resampled:
                            resampled.add(i)
                            self.stats.resampled += 1
                            start(i, base_attempt + cfg.retries + 1)
                        else:
                            why = f"still running {cfg.straggler_s:g} s after the group's quorum"
                            slots[i] = Exclusion(i, "straggler", why, 1)
                            self._slots.release(1)
                            held -= 1
                    deadline = now + cfg.straggler_s if pending and cfg.straggler_s else None
        finally:
            self._slots.release(held)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _episode(self, task: Task, gid: str, index: int, first_attempt: int) -> Slot:
        with _metrics.episode_in_flight(self.env):
            return await self._attempts(task, gid, index, first_attempt)

    async def _attempts(self, task: Task, gid: str, index: int, first_attempt: int) -> Slot:
        cfg = self.config
        eid = f"{gid}/{index}"
        seed = _seed(cfg.seed, gid, index)
        reason, detail = "", ""
        for k in range(cfg.retries + 1):
            req = EpisodeRequest(task, gid, index, seed, first_attempt + k, eid)
            self.tracker.start(eid, task.id)
            try:
                async with asyncio.timeout(cfg.episode_timeout_s):
                    traj = await self.executor.run_episode(req, self.tracker)
                self.breaker.success()
                return traj
            except EpisodeFailure as f:
                reason, detail = f.reason, f.detail
            except TimeoutError:
                reason, detail = "episode_timeout", f"attempt ran over {cfg.episode_timeout_s:g} s"
            finally:
                self.tracker.finish(eid)
            self.stats.faults[f"{self.env}/{reason}"] += 1
            if self.breaker.failure(reason, detail):
                log.error("rollout circuit breaker: %s", self.breaker.diagnosis())
                self._cancel_groups()
            if k < cfg.retries:
                self.stats.retries += 1
                await asyncio.sleep(self._rng.uniform(0.0, cfg.retry_base_s * 2**k))
        return Exclusion(index, reason, detail, cfg.retries + 1)


class _Slots:
    """Episode slots: a group takes ``group_size`` at once (under a lock, so two partial
    takers can never hold every slot between them and wait forever), episodes give them
    back one by one."""

    def __init__(self, n: int) -> None:
        self._sem = asyncio.Semaphore(n)
        self._lock = asyncio.Lock()

    async def acquire(self, n: int) -> None:
        async with self._lock:
            for _ in range(n):
                await self._sem.acquire()

    def release(self, n: int) -> None:
        for _ in range(n):
            self._sem.release()


def _seed(base: int, gid: str, index: int) -> int:
    """A 31-bit episode seed from the run seed, the group id and the index."""
    h = hashlib.blake2b(f"{base}|{gid}|{index}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "big") >> 1


async def _aiter(tasks: Iterable[Task] | AsyncIterable[Task]) -> AsyncIterator[Task]:
    if isinstance(tasks, AsyncIterable):
        async for t in tasks:
            yield t
    else:
        for t in tasks:
            yield t
