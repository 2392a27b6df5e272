"""The rollout engine: run RL episodes against a policy at scale, stream GRPO groups.

    from codegym.rollout import RolloutEngine, RolloutConfig, LocalExecutor, EnvSpec

See ``engine.py`` for the contract (groups, admission, faults, stragglers, staleness) and
``executor.py`` for the seam a Ray executor plugs into.
"""

from codegym.rollout.config import (
    Exclusion,
    Group,
    RolloutAborted,
    RolloutConfig,
    RolloutError,
)
from codegym.rollout.engine import RolloutEngine, RolloutStats
from codegym.rollout.executor import (
    EnvSpec,
    EpisodeFailure,
    EpisodeRequest,
    Executor,
    LocalExecutor,
)
from codegym.rollout.replay import ReplayDiff, replay_trajectory
from codegym.rollout.tracker import CircuitBreaker, EpisodeTracker

__all__ = [
    "CircuitBreaker",
    "EnvSpec",
    "EpisodeFailure",
    "EpisodeRequest",
    "EpisodeTracker",
    "Exclusion",
    "Executor",
    "Group",
    "LocalExecutor",
    "ReplayDiff",
    "RolloutAborted",
    "RolloutConfig",
    "RolloutEngine",
    "RolloutError",
    "RolloutStats",
    "replay_trajectory",
]
