"""Rollout options and the records the engine hands out (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codegym.envs.trajectory import Trajectory
from codegym.errors import CodegymError
from codegym.tasks import Task


class RolloutError(CodegymError, ValueError):
    """A rollout could not run (bad configuration); the message says the fix."""


class RolloutAborted(CodegymError, RuntimeError):
    """The circuit breaker stopped the run; ``diagnosis`` says what kept failing."""

    exit_code = 3  # the run failed on the way, not the input

    def __init__(self, diagnosis: str) -> None:
        super().__init__(diagnosis)
        self.diagnosis = diagnosis


@dataclass(frozen=True)
class RolloutConfig:
    """How the engine schedules, retries and gives up."""

    group_size: int = 8
    """Episodes per task in a GRPO group."""
    model_concurrency: int = 512
    """Model requests in flight (admission control for the inference server)."""
    env_concurrency: int = 8
    """Env steps in flight (admission control for the sandbox; ~2 × sandbox workers)."""
    max_groups_in_flight: int | None = None
    """Groups admitted at once; None: 4 × ``model_concurrency / group_size``. Episodes in
    flight are bounded by ``model_concurrency`` anyway; the headroom lets new groups use the
    slots that finished episodes of a group still waiting on a retry give back."""
    buffer_groups: int = 4
    """Finished groups waiting for the consumer; when full, admission pauses (back-pressure)."""
    retries: int = 2
    """Extra attempts for an episode that failed for an infra reason."""
    retry_base_s: float = 0.05
    """Backoff before retry k is uniform(0, retry_base_s × 2**k) (full jitter)."""
    model_timeout_s: float = 600.0
    """Bound on one model call (the policy has its own per-request timeout too)."""
    episode_timeout_s: float = 1800.0
    """Bound on one episode attempt; past it the attempt is an infra ``episode_timeout``."""
    straggler_s: float | None = None
    """Once ``straggler_quorum`` of a group has finished, the rest get this many seconds."""
    straggler_quorum: float = 0.75
    straggler_policy: Literal["resample", "drop"] = "resample"
    """``resample``: one fresh attempt (dropped if it straggles too); ``drop``: exclude."""
    max_staleness: int | None = None
    """Groups whose oldest turn is more than this many policy versions old are stale."""
    stale_policy: Literal["drop", "regenerate"] = "drop"
    max_regenerations: int = 2
    """Regenerations of one stale group before its episodes are dropped as stale."""
    breaker_threshold: int = 50
    """Consecutive failed attempts that stop the run with a diagnosis."""
    watchdog_s: float = 60.0
    """Log what is in flight when no episode finished for this long."""
    max_turns: int = 64
    """Hard cap on model turns per episode (envs have their own, smaller budgets)."""
    seed: int = 0
    """Base seed; each episode's seed derives from it, the task and its place in the group."""

    def __post_init__(self) -> None:
        ints = {
            "group_size": self.group_size,
            "model_concurrency": self.model_concurrency,
            "env_concurrency": self.env_concurrency,
            "buffer_groups": self.buffer_groups,
            "breaker_threshold": self.breaker_threshold,
            "max_turns": self.max_turns,
        }
        for name, v in ints.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RolloutError(f"RolloutConfig.{name}={v!r}: use an int >= 1")
        if self.retries < 0 or self.max_regenerations < 0:
            raise RolloutError("RolloutConfig.retries and max_regenerations must be >= 0")
        if self.straggler_policy not in ("resample", "drop"):
            raise RolloutError(f"straggler_policy={self.straggler_policy!r}: use resample or drop")
        if self.stale_policy not in ("drop", "regenerate"):
            raise RolloutError(f"stale_policy={self.stale_policy!r}: use drop or regenerate")
        if not 0 < self.straggler_quorum <= 1:
            raise RolloutError(f"straggler_quorum={self.straggler_quorum!r}: use (0, 1]")

    @property
    def groups_in_flight(self) -> int:
        if self.max_groups_in_flight is not None:
            return self.max_groups_in_flight
        return 4 * max(1, -(-self.model_concurrency // self.group_size))


@dataclass(frozen=True)
class Exclusion:
    """An episode that was not scored, and why (never a reward of 0)."""

    index: int
    reason: str
    """``policy_error:<kind>``, ``infra``, ``harness_error``, ``episode_timeout``,
    ``straggler``, ``stale``, ``aborted``."""
    detail: str
    attempts: int


@dataclass(frozen=True)
class Group:
    """A GRPO group: the scored episodes of one task, plus the excluded ones."""

    group_id: str
    task: Task
    trajectories: tuple[Trajectory, ...]
    """Scored episodes, in index order."""
    excluded: tuple[Exclusion, ...]
    regenerations: int = 0

    @property
    def rewards(self) -> list[float]:
        return [t.reward if t.reward is not None else 0.0 for t in self.trajectories]

    @property
    def policy_versions(self) -> tuple[int, ...]:
        return tuple(sorted({v for t in self.trajectories for v in t.policy_versions}))
