"""The trajectory record: everything one episode produced, in a form a trainer can use.

A ``Trajectory`` is frozen and JSON-round-trippable (``to_record`` / ``from_record``):

- ``messages``: the whole conversation; ``turns``: per model turn the prompt and completion
  token ids, logprobs and the policy version that produced it; ``tool_io``: every tool call
  with its input and output.
- In token mode (``token_exact=True``) ``token_ids`` is the episode's full sequence, built by
  *extending* the first prompt with each completion's sampled ids and each observation's
  rendered ids (never re-tokenizing text), and ``loss_mask`` marks the sampled tokens (1)
  versus prompt and observation tokens (0). ``logprobs`` aligns with ``token_ids`` (0.0 where
  the mask is 0).
- ``reward``/``rewards``/``outcome``: the result; ``reward`` is None for infra outcomes
  (those trajectories are only kept for diagnosis, never trained on).
- ``timings``: seconds per stage (``queue``, ``model``, ``env``, ``sandbox``, ``tool``,
  ``reward``, ``total``); ``seed``; ``env_digest`` (env config + sandbox limits + harness).

``key()`` is the content key: same env, task, policy, sampling, seed and model output →
same key, so a replayed episode lands on the stored one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from codegym.envs.env import EnvError
from codegym.policies.policy import Message
from codegym.sandbox import Limits
from codegym.store.keys import content_key
from codegym.tasks import IOCase, Task


@dataclass(frozen=True)
class ModelTurn:
    """One model call inside an episode."""

    text: str
    finish_reason: str
    prompt_ids: tuple[int, ...] | None = None
    """The prompt exactly as the model saw it (token mode, or when the server returned it)."""
    completion_ids: tuple[int, ...] | None = None
    """The sampled tokens, as sampled."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each sampled token."""
    policy_version: int | None = None
    """Weights version that produced this turn."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    tokens_in: int | None = None
    tokens_out: int | None = None
    model_s: float = field(default=0.0, compare=False)
    """Wall seconds of the model call (a measurement: not part of equality)."""


@dataclass(frozen=True)
class Trajectory:
    """One finished episode (scored, or excluded with an infra outcome)."""

    env: str
    env_digest: str
    task_id: str
    task_digest: str
    group_id: str
    """The GRPO group this episode belongs to (task, group index)."""
    index: int
    """Position in the group, 0..group_size-1."""
    seed: int
    policy: str
    params_digest: str
    messages: tuple[Message, ...]
    turns: tuple[ModelTurn, ...]
    outcome: str
    reward: float | None
    detail: str = ""
    rewards: Mapping[str, float] = field(default_factory=dict)
    tool_io: tuple[dict[str, Any], ...] = ()
    token_exact: bool = False
    """True when ``token_ids`` was built by extension from sampled and rendered ids."""
    token_ids: tuple[int, ...] = ()
    loss_mask: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Seconds per stage; wall-clock facts, so not part of equality or the key."""
    attempt: int = 0
    """0 for the first try; >0 after infra retries or a straggler resample."""
    info: Mapping[str, Any] = field(default_factory=dict)
    env_options: Mapping[str, Any] = field(default_factory=dict)
    """The options the env was made with (``make_env(env, ..., **env_options)``)."""
    task: Mapping[str, Any] = field(default_factory=dict)
    """The task itself (``task_to_record``), so a trajectory can be replayed on its own."""

    @property
    def policy_versions(self) -> tuple[int, ...]:
        return tuple(t.policy_version for t in self.turns if t.policy_version is not None)

    def key(self) -> str:
        """Content key over the episode's inputs and the model's outputs."""
        return content_key(
            "trajectory",
            env=self.env_digest,
            task=self.task_digest,
            policy=self.policy,
            params=self.params_digest,
            seed=self.seed,
            index=self.index,
            turns=[[t.text, list(t.completion_ids or ()), list(t.tool_calls)] for t in self.turns],
        )

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (tuples become lists)."""
        return {
            "env": self.env,
            "env_digest": self.env_digest,
            "task_id": self.task_id,
            "task_digest": self.task_digest,
            "group_id": self.group_id,
            "index": self.index,
            "seed": self.seed,
            "policy": self.policy,
            "params_digest": self.params_digest,
            "messages": list(self.messages),
            "turns": [_turn_record(t) for t in self.turns],
            "outcome": self.outcome,
            "reward": self.reward,
            "detail": self.detail,
            "rewards": dict(self.rewards),
            "tool_io": list(self.tool_io),
            "token_exact": self.token_exact,
            "token_ids": list(self.token_ids),
            "loss_mask": list(self.loss_mask),
            "logprobs": list(self.logprobs),
            "timings": dict(self.timings),
            "attempt": self.attempt,
            "info": dict(self.info),
            "env_options": dict(self.env_options),
            "task": dict(self.task),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Trajectory:
        """Inverse of ``to_record``.

        Raises:
            EnvError: a required field is missing (the message names it); a ValueError.
        """
        try:
            return cls(
                env=rec["env"],
                env_digest=rec["env_digest"],
                task_id=rec["task_id"],
                task_digest=rec["task_digest"],
                group_id=rec["group_id"],
                index=int(rec["index"]),
                seed=int(rec["seed"]),
                policy=rec["policy"],
                params_digest=rec["params_digest"],
                messages=tuple(rec["messages"]),
                turns=tuple(_turn_from(t) for t in rec["turns"]),
                outcome=rec["outcome"],
                reward=rec["reward"],
                detail=rec.get("detail", ""),
                rewards=dict(rec.get("rewards", {})),
                tool_io=tuple(rec.get("tool_io", ())),
                token_exact=bool(rec.get("token_exact", False)),
                token_ids=tuple(rec.get("token_ids", ())),
                loss_mask=tuple(rec.get("loss_mask", ())),
                logprobs=tuple(rec.get("logprobs", ())),
                timings=dict(rec.get("timings", {})),
                attempt=int(rec.get("attempt", 0)),
                info=dict(rec.get("info", {})),
                env_options=dict(rec.get("env_options", {})),
                task=dict(rec.get("task", {})),
            )
        except KeyError as e:
            raise EnvError(f"trajectory record lacks the field {e.args[0]!r}") from e


def _opt_tuple(v: Any) -> tuple[Any, ...] | None:
    return None if v is None else tuple(v)


def _turn_record(t: ModelTurn) -> dict[str, Any]:
    return {
        "text": t.text,
        "finish_reason": t.finish_reason,
        "prompt_ids": None if t.prompt_ids is None else list(t.prompt_ids),
        "completion_ids": None if t.completion_ids is None else list(t.completion_ids),
        "logprobs": None if t.logprobs is None else list(t.logprobs),
        "policy_version": t.policy_version,
        "tool_calls": list(t.tool_calls),
        "tokens_in": t.tokens_in,
        "tokens_out": t.tokens_out,
        "model_s": t.model_s,
    }


def _turn_from(r: Mapping[str, Any]) -> ModelTurn:
    return ModelTurn(
        text=r["text"],
        finish_reason=r["finish_reason"],
        prompt_ids=_opt_tuple(r.get("prompt_ids")),
        completion_ids=_opt_tuple(r.get("completion_ids")),
        logprobs=_opt_tuple(r.get("logprobs")),
        policy_version=r.get("policy_version"),
        tool_calls=tuple(r.get("tool_calls", ())),
        tokens_in=r.get("tokens_in"),
        tokens_out=r.get("tokens_out"),
        model_s=float(r.get("model_s", 0.0)),
    )


def task_to_record(task: Task) -> dict[str, Any]:
    """The task as JSON (``metadata`` included), for self-contained trajectories."""
    return {
        "id": task.id,
        "prompt": task.prompt,
        "entry_point": task.entry_point,
        "test": task.test,
        "io_cases": [[c.stdin, c.expected] for c in task.io_cases],
        "compare": task.compare,
        "reference": task.reference,
        "cluster": task.cluster,
        "limits": None if task.limits is None else _limits_record(task.limits),
        "metadata": dict(task.metadata),
    }


def task_from_record(rec: Mapping[str, Any]) -> Task:
    """Inverse of ``task_to_record`` (the digest round-trips)."""
    lim = rec.get("limits")
    return Task(
        id=rec["id"],
        prompt=rec["prompt"],
        entry_point=rec.get("entry_point", ""),
        test=rec.get("test", ""),
        io_cases=tuple(IOCase(s, e) for s, e in rec.get("io_cases", ())),
        compare=rec.get("compare", "tokens"),
        reference=rec.get("reference", ""),
        cluster=rec.get("cluster", ""),
        limits=None if lim is None else Limits(**lim),
        metadata=dict(rec.get("metadata", {})),
    )


def _limits_record(lim: Limits) -> dict[str, Any]:
    # The declared fields (not to_wire, which resolves wall_s) so the digest round-trips.
    return {k: getattr(lim, k) for k in lim.__dataclass_fields__}
