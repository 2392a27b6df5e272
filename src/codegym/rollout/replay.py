"""Replay: re-run a stored trajectory's model turns through its env and report differences.

The model is not called: the recorded turns are fed to a fresh env (same name, options,
task and seed). Any difference in observations, tool outputs, outcome or reward is listed.
An empty diff means the episode is reproducible under the current harness; a difference
surfaces sandbox nondeterminism or a changed env/harness (``env_digest`` is compared too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codegym.envs.env import EnvInfraError, Message, Resources, Turn, make_env
from codegym.envs.trajectory import Trajectory, task_from_record
from codegym.rollout.config import RolloutError


@dataclass(frozen=True)
class ReplayDiff:
    """What a replay found."""

    key: str
    outcome: str
    """The outcome on replay (an infra outcome when the replay itself failed)."""
    reward: float | None
    differences: tuple[str, ...] = field(default_factory=tuple)

    @property
    def same(self) -> bool:
        return not self.differences

    def to_record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "same": self.same,
            "outcome": self.outcome,
            "reward": self.reward,
            "differences": list(self.differences),
        }


async def replay_trajectory(traj: Trajectory, resources: Resources) -> ReplayDiff:
    """Re-score ``traj`` by replaying its turns.

    Raises:
        EnvError: the trajectory's env is not registered here (load its file first).
        RolloutError: the trajectory holds no task record (a ValueError).
    """
    if not traj.task:
        raise RolloutError(f"trajectory {traj.key()[:12]} holds no task; it cannot be replayed")
    task = task_from_record(traj.task)
    diffs: list[str] = []
    if task.digest() != traj.task_digest:
        diffs.append("task digest differs from the recorded one")
    env = make_env(traj.env, resources, **traj.env_options)
    if env.digest() != traj.env_digest:
        diffs.append("env config, sandbox limits or harness version changed (env_digest)")
    messages: list[Message] = []
    tool_io: list[dict[str, Any]] = []
    outcome, reward, rewards = "harness_error", None, {}
    try:
        messages += await env.reset(task, traj.seed)
        for i, t in enumerate(traj.turns):
            assistant: Message = {"role": "assistant", "content": t.text}
            if t.tool_calls:
                assistant["tool_calls"] = [dict(c) for c in t.tool_calls]
            messages.append(assistant)
            res = await env.step(Turn(t.text, t.finish_reason, t.tool_calls, t.tokens_out or 0))
            tool_io += res.tool_io
            if res.done:
                outcome, reward, rewards = (
                    res.outcome or "harness_error",
                    res.reward,
                    dict(res.rewards),
                )
                if i != len(traj.turns) - 1:
                    diffs.append(f"episode ended at turn {i + 1} of {len(traj.turns)}")
                break
            messages += res.observation
        else:
            diffs.append("the recorded turns ran out before the env finished")
    except EnvInfraError as e:
        outcome = e.outcome
        diffs.append(f"replay hit an infra failure: {e.detail}")
    finally:
        await env.close()
    if outcome != traj.outcome:
        diffs.append(f"outcome {traj.outcome!r} -> {outcome!r}")
    if reward != traj.reward:
        diffs.append(f"reward {traj.reward!r} -> {reward!r}")
    if rewards != dict(traj.rewards):
        diffs.append(f"rewards {dict(traj.rewards)} -> {rewards}")
    if messages != list(traj.messages):
        first = next(
            (j for j, (a, b) in enumerate(zip(messages, traj.messages, strict=False)) if a != b),
            min(len(messages), len(traj.messages)),
        )
        diffs.append(f"messages differ from message {first}")
    outs = [(d.get("name"), d.get("output")) for d in tool_io]
    if outs != [(d.get("name"), d.get("output")) for d in traj.tool_io]:
        diffs.append("tool outputs differ")
    return ReplayDiff(traj.key(), outcome, reward, tuple(diffs))
