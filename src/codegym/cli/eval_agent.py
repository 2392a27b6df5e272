"""``codegym eval --env ENV``: agents on a suite, each sample one scored episode.

Writes ``trajectories.jsonl`` beside the run's ``results.jsonl`` (every scored episode,
token-exact where the policy allows), so an eval of an agent can be replayed and read turn
by turn. See ``codegym.evals.agents`` for how episodes become samples.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from codegym.cli._common import console, open_sandbox
from codegym.cli._progress import score_progress
from codegym.envs import Trajectory
from codegym.evals.agents import check_gold, evaluate_episodes
from codegym.evals.runner import SampleResult
from codegym.policies import SamplingParams
from codegym.rollout import EnvSpec
from codegym.sandbox import Sandbox
from codegym.tasks import Task


async def evaluate_agents(
    tasks: list[Task],
    env: EnvSpec,
    policy: Any,
    params: SamplingParams,
    tier: str,
    workers: int | None,
    images: Any,
    out: Path,
    *,
    sandbox_url: list[str] | None = None,
    model_concurrency: int,
    ground_truth: bool,
    quiet: bool,
    seed: int,
) -> list[SampleResult]:
    out.mkdir(parents=True, exist_ok=True)
    async with _sandbox(tier, workers, images, sandbox_url) as sb, policy:
        broken: list[SampleResult] = []
        if ground_truth and any(t.repo for t in tasks):
            tasks, broken = await check_gold(sb, tasks, params.n)
            for q in {r.task_id: r for r in broken}.values():
                console.print(f"[yellow]quarantined[/] {q.task_id}: {q.detail}", highlight=False)
        with (
            score_progress(len(tasks) * params.n, "eval", quiet) as progress,
            (out / "trajectories.jsonl").open("w") as tf,
        ):

            def keep(t: Trajectory) -> None:
                tf.write(json.dumps(t.to_record()) + "\n")

            results = await evaluate_episodes(
                tasks,
                env,
                policy,
                params,
                sb,
                tier=tier,
                seed=seed,
                model_concurrency=model_concurrency,
                on_result=progress,
                on_trajectory=keep,
            )
    return broken + results


@asynccontextmanager
async def _sandbox(
    tier: str, workers: int | None, images: Any, urls: list[str] | None
) -> AsyncIterator[Any]:
    """A local pool (with the suite's images), or the sandbox service (``--sandbox-url``):
    the code and tool environments run there too, the repo one needs a local pool."""
    if urls:
        async with open_sandbox(tier, workers, urls) as (remote, _):
            yield remote
    else:
        async with Sandbox(tier=tier, workers=workers, images=images) as sb:
            yield sb
