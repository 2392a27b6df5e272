"""Evaluating agents: a multi-turn env's episodes scored as eval samples.

``codegym eval --env ENV`` runs each task's ``n`` episodes through the rollout engine (the
executor, retries and exclusions of ``codegym rollout``) and turns each episode into a
``SampleResult``: its outcome, passed when its reward is full, the tokens and model time of
all its turns. An episode the engine excluded (the model server or the sandbox failed
after retries) becomes an infra sample, never a failure. pass@k and the summary then read
them as they read single-turn samples.

Repository tasks get their ground truth checked first: a task whose gold patch does not
resolve in a fresh workspace is quarantined (``broken_ground_truth``), as a single-turn
task whose reference fails is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from codegym.envs import Resources, Trajectory
from codegym.evals.runner import SampleResult, quarantined_results
from codegym.policies import SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.rollout.config import Exclusion
from codegym.tasks import Task

OnResult = Callable[[SampleResult], None]


def episode_sample(t: Trajectory, cluster: str) -> SampleResult:
    """The eval row of one scored episode. ``completion`` is what was graded: the patch of a
    repository episode, else the last model turn."""
    patch = t.info.get("patch")
    completion = patch if isinstance(patch, str) else (t.turns[-1].text if t.turns else "")
    return SampleResult(
        t.task_id,
        t.index,
        completion,
        t.reward is not None and t.reward >= 1.0,
        t.outcome,
        t.detail,
        cluster,
        wall_s=t.timings.get("total"),
        tokens_in=sum(x.tokens_in or 0 for x in t.turns),
        tokens_out=sum(x.tokens_out or 0 for x in t.turns),
        model_s=round(sum(x.model_s for x in t.turns), 3),
        fields={"turns": len(t.turns), "reward": t.reward, "trajectory_key": t.key()},
    )


def excluded_sample(task: Task, e: Exclusion) -> SampleResult:
    """An episode that was not scored: an infra sample that names why."""
    outcome = "policy_error" if e.reason.startswith("policy_error") else "infra"
    detail = f"{e.reason}: {e.detail} (after {e.attempts} attempts)"
    return SampleResult(task.id, e.index, "", False, outcome, detail, task.group)


async def check_gold(
    sb: Any, tasks: Sequence[Task], n: int
) -> tuple[list[Task], list[SampleResult]]:
    """Repository tasks whose gold patch resolves (graded as any prediction is), and the
    quarantined samples of those whose does not. Other tasks pass through."""
    from codegym.tasks.swe.grade import grade
    from codegym.tasks.swe.task import swe_of

    async def holds(t: Task) -> tuple[bool, str]:
        if not t.repo:
            return True, ""
        g = await grade(sb, swe_of(t), swe_of(t).patch)
        return g.resolved, f"{g.outcome}: {g.detail}"[:500]

    verdicts = await asyncio.gather(*(holds(t) for t in tasks))
    kept = [t for t, (ok, _) in zip(tasks, verdicts, strict=True) if ok]
    broken: list[SampleResult] = []
    for t, (ok, why) in zip(tasks, verdicts, strict=True):
        if not ok:
            broken += quarantined_results(t.id, n, f"gold patch does not resolve: {why}")
    return kept, broken


async def evaluate_episodes(
    tasks: Sequence[Task],
    env: EnvSpec,
    policy: Any,
    params: SamplingParams,
    sb: Any,
    *,
    tier: str = "jail",
    seed: int = 0,
    model_concurrency: int = 32,
    retries: int = 2,
    on_result: OnResult | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> list[SampleResult]:
    """``params.n`` episodes of ``env`` per task, as samples in task order."""
    resources = Resources(sb, tier=tier)
    env.make(resources)  # bad options fail here, before any request
    executor = LocalExecutor(
        env,
        policy,
        params,
        resources,
        prompt=policy.mode,
        model_concurrency=model_concurrency,
        env_concurrency=2 * sb.size,
    )
    cfg = RolloutConfig(
        group_size=params.n, model_concurrency=model_concurrency, retries=retries, seed=seed
    )
    engine = RolloutEngine(executor, cfg, env=env.name)
    by_task: dict[str, list[SampleResult]] = {}
    async for g in engine.run(list(tasks)):
        rows = [episode_sample(t, g.task.group) for t in g.trajectories]
        rows += [excluded_sample(g.task, e) for e in g.excluded]
        for t in g.trajectories:
            if on_trajectory is not None:
                on_trajectory(t)
        for r in rows:
            if on_result is not None:
                on_result(r)
        by_task[g.task.id] = sorted(rows, key=lambda r: r.sample_index)
    return [r for t in tasks for r in by_task.get(t.id, [])]
