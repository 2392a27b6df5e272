"""codegym environments as TRL ``GRPOTrainer`` reward functions.

    reward = EnvReward(tasks, env="code", options={"style": "continuation"})
    trainer = GRPOTrainer(model, reward_funcs=reward, train_dataset=task_dataset(tasks), ...)
    trainer.train(); reward.close()

``task_dataset(tasks)`` gives the dataset TRL samples prompts from: columns ``prompt`` (the
env's first message; the task's own text for a continuation-style env) and ``task_id``.
TRL passes every dataset column to reward functions, so ``EnvReward(prompts=...,
completions=..., task_id=[...])`` finds each completion's task, runs one env episode on
it (reset, then the completion as the model's single turn: the real sandbox scores it) and
returns the env's reward.

Infra outcomes are never a reward of 0: the episode is retried ``retries`` times, then the
sample gets ``None``, which TRL treats as unscorable (left out of its group's baseline,
advantage 0); ``stats`` counts them. The sandbox lives on a private event loop in a
background thread, because TRL calls reward functions synchronously from its own loop.
Single-turn envs only: a multi-turn env needs TRL's rollout hook, not a reward function.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from codegym.envs.env import EnvError, EnvInfraError, Resources, Turn, make_env
from codegym.sandbox import Limits, Sandbox
from codegym.tasks import Task, is_infra

__all__ = ["EnvReward", "task_dataset"]


def _first_prompt(task: Task, env: str, options: Mapping[str, Any]) -> str:
    async def go() -> str:
        e = make_env(env, Resources(None), **options)
        msgs = await e.reset(task, 0)
        await e.close()
        return "".join(str(m.get("content") or "") for m in msgs)

    return asyncio.run(go())


def task_dataset(
    tasks: Sequence[Task], env: str = "code", options: Mapping[str, Any] | None = None
) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` and ``task_id`` columns for TRL."""
    from datasets import Dataset

    opts = dict(options if options is not None else {"style": "continuation"})
    return Dataset.from_dict(
        {
            "prompt": [_first_prompt(t, env, opts) for t in tasks],
            "task_id": [t.id for t in tasks],
        }
    )


class EnvReward:
    """A TRL reward function backed by a codegym env and a real sandbox (see module doc)."""

    def __init__(
        self,
        tasks: Sequence[Task],
        env: str = "code",
        options: Mapping[str, Any] | None = None,
        *,
        tier: str = "jail",
        workers: int = 2,
        limits: Limits | None = None,
        retries: int = 1,
    ) -> None:
        self.tasks = {t.id: t for t in tasks}
        if len(self.tasks) != len(tasks):
            raise EnvError("EnvReward: task ids must be unique")
        self.env = env
        self.options = dict(options if options is not None else {"style": "continuation"})
        make_env(
            env, Resources(None), **self.options
        )  # a bad name/option fails here, not mid-training
        self.retries = retries
        self.limits = limits
        self.stats: Counter[str] = Counter()
        """Outcomes of every scored sample, and ``excluded:<reason>`` for the None ones."""
        self.__name__ = f"codegym_{env}"  # TRL names the metric after the function
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._sandbox = Sandbox(tier=tier, workers=workers)
        self._call(self._sandbox.__aenter__())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Stop the sandbox and the loop thread (idempotent)."""
        if self._loop.is_closed():
            return
        self._call(self._sandbox.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> EnvReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        task_id: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """One reward per completion; ``None`` where the infrastructure failed.

        Raises:
            EnvError: no ``task_id`` column, or an id not among the tasks.
        """
        if task_id is None:
            raise EnvError(
                "EnvReward needs the dataset's task_id column; build it with task_dataset(tasks)"
            )
        texts = [_text(c) for c in completions]
        for tid in task_id:
            if tid not in self.tasks:
                raise EnvError(f"EnvReward: unknown task_id {tid!r}; pass that task to EnvReward")
        out: list[float | None] = self._call(
            self._score_all([self.tasks[t] for t in task_id], texts)
        )
        return out

    async def _score_all(self, tasks: list[Task], texts: list[str]) -> list[float | None]:
        return list(
            await asyncio.gather(*(self._one(t, x) for t, x in zip(tasks, texts, strict=True)))
        )

    async def _one(self, task: Task, text: str) -> float | None:
        reason = ""
        for _ in range(self.retries + 1):
            env = make_env(self.env, Resources(self._sandbox, limits=self.limits), **self.options)
            try:
                await env.reset(task, 0)
                res = await env.step(Turn(text=text))
            except EnvInfraError as e:
                reason = e.outcome
                continue
            finally:
                await env.close()
            if res.outcome is None or is_infra(res.outcome) or res.reward is None:
                reason = res.outcome or "harness_error"
                continue
            self.stats[res.outcome] += 1
            return float(res.reward)
        self.stats[f"excluded:{reason}"] += 1
        return None


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    # Conversational: a list of messages; the last assistant content is the answer.
    for m in reversed(list(completion)):
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            return str(m.get("content") or "")
    raise EnvError(f"EnvReward: cannot read a completion of type {type(completion).__name__}")
