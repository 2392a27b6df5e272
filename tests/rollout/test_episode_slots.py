"""Engine admission counts episodes, not groups: a group waiting on one slow episode gives
its other slots to new groups, and episodes in flight never exceed ``model_concurrency``."""

from __future__ import annotations

import asyncio
from typing import Any

from codegym.envs import Env, Message, Resources, StepResult, Turn, register
from codegym.policies import Generation, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.tasks import IOCase, Task


@register("test_slots_echo")
class _Echo(Env):
    async def reset(self, task: Task, seed: int) -> list[Message]:
        return [{"role": "user", "content": task.id}]

    async def step(self, turn: Turn) -> StepResult:
        return StepResult(done=True, reward=1.0, outcome="pass")


class _Policy:
    """The first call of each ``slow*`` task takes 1 s, the rest 10 ms; counts calls in flight."""

    name = "slots"

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.slowed: set[str] = set()

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        task_id = prompt[0]["content"]
        slow = task_id.startswith("slow") and task_id not in self.slowed
        self.slowed.add(task_id)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(1.0 if slow else 0.01)
        finally:
            self.in_flight -= 1
        return [Generation("ok", "stop")]


async def test_finished_episodes_free_their_slots_for_new_groups() -> None:
    policy = _Policy()
    ex = LocalExecutor(
        EnvSpec("test_slots_echo"), policy, SamplingParams(), Resources(), model_concurrency=100
    )
    cfg = RolloutConfig(group_size=2, model_concurrency=8, buffer_groups=16)
    engine = RolloutEngine(ex, cfg)
    names = [f"slow{i}" for i in range(4)] + [f"fast{i}" for i in range(6)]
    tasks = [Task(id=n, prompt=n, io_cases=(IOCase("", ""),)) for n in names]
    order = [g.group_id async for g in engine.run(tasks)]
    # Per-group admission (4 groups of 2 for 8 slots) would run the four slow groups alone
    # for a second, their finished episodes' slots idle; episode slots give those four
    # slots to the fast groups, which all finish first.
    assert [o[:4] for o in order] == ["fast"] * 6 + ["slow"] * 4
    assert policy.max_in_flight <= 8  # the engine's bound, not the executor's (100)
    s = engine.stats.summary()
    assert s["requested"] == s["scored"] == 20
