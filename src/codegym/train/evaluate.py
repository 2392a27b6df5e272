"""Held-out pass rate of a model through the same env, policy and sandbox the trainer uses.

    rate = asyncio.run(heldout_pass_rate(model_dir, config, samples=4))

Tasks are the held-out side of ``config.tasks``'s split (``codegym.train.split``), and a
model whose ``lineage.json`` says it was trained on any of them is refused
(``HeldoutError``); the result carries the held-out set's digest. Each task gets
``samples`` episodes at the config's sampling settings; the result has pass@1 (the mean
over tasks of the per-task pass fraction), the per-task pass counts for a paired
comparison, and the outcome counts. Infra-excluded episodes are left out of a task's
fraction, never counted as failures. For a gated verdict with CIs, write results and use
``codegym compare``; this is the trainer's quick read-out.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from codegym.rollout import RolloutConfig, RolloutEngine
from codegym.sandbox import Sandbox
from codegym.tasks import environments
from codegym.tasks.outcomes import PASSING_OUTCOMES
from codegym.train.config import ConfigError, TrainConfig
from codegym.train.policy import local_policy
from codegym.train.split import check_heldout, read_lineage, split_tasks
from codegym.train.trainer import training_executor

__all__ = ["heldout_pass_rate"]


async def heldout_pass_rate(
    model_dir: str | Path, config: TrainConfig, samples: int = 4, seed: int = 12345
) -> dict[str, Any]:
    """pass@1 on the held-out tasks (see the module docstring).

    Raises:
        ConfigError: ``config.tasks.heldout_tasks`` is 0 or ``samples`` < 1.
        HeldoutError: the model was trained on some of the held-out tasks.
    """
    t = config.tasks
    if t.heldout_tasks < 1 or samples < 1:
        raise ConfigError("heldout_pass_rate: set tasks.heldout_tasks >= 1 and samples >= 1")
    heldout = split_tasks(t).heldout
    check_heldout(heldout, read_lineage(model_dir), str(model_dir))
    tasks = list(heldout)
    policy = local_policy(model_dir, max_batch=config.sampling.max_batch)
    t0 = time.perf_counter()
    images = environments.store_for(tasks)
    async with Sandbox(
        tier=config.sandbox.tier, workers=config.sandbox.workers, images=images
    ) as sb:
        engine = RolloutEngine(
            training_executor(config, policy, sb),
            RolloutConfig(
                group_size=samples, env_concurrency=config.sandbox.env_concurrency, seed=seed
            ),
            env=config.env.name,
        )
        per_task: dict[str, list[bool]] = {}
        outcomes: Counter[str] = Counter()
        async for g in engine.run(tasks):
            per_task[g.task.id] = [tr.outcome in PASSING_OUTCOMES for tr in g.trajectories]
            outcomes.update(tr.outcome for tr in g.trajectories)
    fracs = [sum(v) / len(v) for v in per_task.values() if v]
    return {
        "tasks": len(tasks),
        "heldout_digest": heldout.digest,
        "samples": samples,
        "pass1": sum(fracs) / len(fracs) if fracs else 0.0,
        "per_task_passes": {k: sum(v) for k, v in sorted(per_task.items())},
        "outcomes": dict(outcomes),
        "excluded": engine.stats.summary()["excluded"],
        "seconds": round(time.perf_counter() - t0, 2),
    }
