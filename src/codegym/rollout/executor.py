"""Running one episode attempt: the executor seam, and the local asyncio executor.

``Executor`` is the seam between scheduling (the engine: groups, retries, staleness,
stragglers) and execution (env + policy loop). ``LocalExecutor`` runs episodes in this
process; a Ray executor would ship the same ``EpisodeRequest`` to an actor that owns a
sandbox pool and return the same ``Trajectory`` or ``EpisodeFailure``.

An attempt either returns a ``Trajectory`` with a model outcome, or raises
``EpisodeFailure`` with an infra reason (``policy_error:<kind>``, ``infra``,
``harness_error``...), which the engine retries and then excludes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from codegym.envs.env import ENVS, Env, EnvError, EnvInfraError, Message, Resources, Turn, make_env
from codegym.envs.tokens import TextTokenPolicy, Tokenizer, TokenPolicy
from codegym.envs.trajectory import ModelTurn, Trajectory, task_to_record
from codegym.errors import CodegymError
from codegym.policies.errors import PolicyError
from codegym.policies.policy import Generation, Policy, SamplingParams
from codegym.rollout.config import RolloutError
from codegym.rollout.tracker import EpisodeTracker
from codegym.tasks import Task, is_infra
from codegym.telemetry.tracing import span


class EpisodeFailure(CodegymError):
    """An attempt failed for a reason that is not the model's (retried, then excluded)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class EpisodeRequest:
    """One attempt at one episode."""

    task: Task
    group_id: str
    index: int
    seed: int
    attempt: int
    episode_id: str


@dataclass(frozen=True)
class EnvSpec:
    """A registered env by name, with its options."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def make(self, resources: Resources) -> Env:
        return make_env(self.name, resources, **self.options)

    def check(self) -> None:
        """Refuse an unknown env or option now, before any episode (every executor calls
        this, so the same bad spec is the same ``EnvError`` wherever episodes would run).

        Raises:
            EnvError: the env is not registered, or an option is not one of its own.
        """
        cls = ENVS.get(self.name)
        if cls is None:
            make_env(self.name, Resources())  # raises, naming the registered envs
            return
        unknown = set(self.options) - set(cls.defaults)
        if unknown:
            raise EnvError(
                f"env {self.name!r}: unknown option(s) {sorted(unknown)}; "
                f"known: {sorted(cls.defaults)}"
            )


class Executor(Protocol):
    """Runs episode attempts (local asyncio today; Ray actors later)."""

    async def run_episode(self, req: EpisodeRequest, tracker: EpisodeTracker) -> Trajectory:
        """Raises ``EpisodeFailure`` for infra reasons; never returns an infra outcome."""
        ...

    def current_version(self) -> int:
        """The policy version new samples come from (for staleness)."""
        ...


class LocalExecutor:
    """Env + policy loop in this event loop, with bounded model and env concurrency.

    Modes: ``prompt="chat"`` sends the conversation; ``prompt="completions"`` sends text
    (the first user message, then extended by each completion and observation); with a
    ``tokenizer`` and a ``TokenPolicy`` the episode is token-exact (see ``envs.tokens``).
    """

    def __init__(
        self,
        env: EnvSpec,
        policy: Policy | TokenPolicy,
        params: SamplingParams,
        resources: Resources,
        *,
        prompt: str = "chat",
        tokenizer: Tokenizer | None = None,
        model_concurrency: int = 512,
        env_concurrency: int = 8,
        model_timeout_s: float = 600.0,
        max_turns: int = 64,
        version: Any = None,
    ) -> None:
        if prompt not in ("chat", "completions"):
            raise RolloutError(f"prompt={prompt!r}: use 'chat' or 'completions'")
        env.check()
        if tokenizer is not None and not isinstance(policy, TokenPolicy):
            # A native generate_tokens (OpenAIPolicy, local models) is exact; a text-only
            # policy gets the decode-the-prompt adapter, which refuses when it cannot be.
            if not isinstance(policy, Policy):
                raise RolloutError("token mode (a tokenizer) needs a policy with generate_tokens")
            policy = TextTokenPolicy(policy, tokenizer)
        if tokenizer is None and not isinstance(policy, Policy):
            raise RolloutError(
                f"policy {type(policy).__name__} has no generate(); give it one, or pass a "
                "tokenizer to run token mode through its generate_tokens()"
            )
        self.env = env
        self.policy = policy
        self.params = replace(params, n=1)
        self.params_digest = self.params.digest()
        self.resources = resources
        self.prompt = prompt
        self.tokenizer = tokenizer
        self._model_sem = asyncio.Semaphore(model_concurrency)
        self._env_sem = asyncio.Semaphore(env_concurrency)
        self._model_timeout = model_timeout_s
        self._max_turns = max_turns
        self._version = version
        self._env_digest: str | None = None

    def current_version(self) -> int:
        return int(self._version()) if callable(self._version) else 0

    async def run_episode(self, req: EpisodeRequest, tracker: EpisodeTracker) -> Trajectory:
        eid = req.episode_id
        env = self.env.make(self.resources)
        if self._env_digest is None:
            self._env_digest = env.digest()
        timings: dict[str, float] = {"queue": 0.0, "model": 0.0, "env": 0.0}
        turns: list[ModelTurn] = []
        tool_io: list[dict[str, Any]] = []
        ids: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        t_start = time.perf_counter()
        # One trace per episode: policy calls, env steps (tools, sandbox runs, reward) nest
        # under it. ExitStack keeps the body unindented; the span ends in ``finally``.
        traced = contextlib.ExitStack()
        ep_span = traced.enter_context(
            span("episode", env=self.env.name, task=req.task.id, index=req.index)
        )
        try:
            tracker.stage(eid, "env")
            messages: list[Message] = await env.reset(req.task, req.seed)
            text_prompt = _first_text(messages)
            if self.tokenizer is not None:
                ids = self.tokenizer.render(messages)
                mask, lps = [0] * len(ids), [0.0] * len(ids)
            params = (
                replace(self.params, seed=req.seed) if self.params.seed is None else self.params
            )
            for _ in range(self._max_turns):
                tracker.stage(eid, "queue_model")
                t0 = time.perf_counter()
                async with self._model_sem:
                    t1 = time.perf_counter()
                    tracker.stage(eid, "model")
                    version = self.current_version()
                    with span("policy.call", policy=getattr(self.policy, "name", None)):
                        gen = await self._generate(messages, text_prompt, ids, params)
                    t2 = time.perf_counter()
                timings["queue"] += t1 - t0
                timings["model"] += t2 - t1
                turn = ModelTurn(
                    text=gen.text,
                    finish_reason=gen.finish_reason,
                    prompt_ids=tuple(ids) if self.tokenizer is not None else gen.prompt_token_ids,
                    completion_ids=gen.token_ids,
                    logprobs=gen.logprobs,
                    policy_version=gen.policy_version
                    if gen.policy_version is not None
                    else version,
                    tool_calls=gen.tool_calls,
                    tokens_in=gen.tokens_in,
                    tokens_out=gen.tokens_out,
                    model_s=gen.model_s,
                )
                turns.append(turn)
                if self.tokenizer is not None:
                    out = list(gen.token_ids or ())
                    ids += out
                    mask += [1] * len(out)
                    lps += list(gen.logprobs) if gen.logprobs is not None else [0.0] * len(out)
                assistant: Message = {"role": "assistant", "content": gen.text}
                if gen.tool_calls:
                    assistant["tool_calls"] = [dict(c) for c in gen.tool_calls]
                messages.append(assistant)
                tracker.stage(eid, "queue_env")
                t3 = time.perf_counter()
                async with self._env_sem:
                    t4 = time.perf_counter()
                    tracker.stage(eid, "env")
                    with span("env.step", tool_calls=len(gen.tool_calls)) as step_span:
                        res = await env.step(
                            Turn(gen.text, gen.finish_reason, gen.tool_calls, gen.tokens_out or 0)
                        )
                        if res.reward is not None:
                            step_span.set_attribute("reward", float(res.reward))
                        ep_span.set_attribute("outcome", str(res.outcome))
                    t5 = time.perf_counter()
                timings["queue"] += t4 - t3
                timings["env"] += t5 - t4
                for k, v in res.timings.items():
                    timings[k] = timings.get(k, 0.0) + v
                tool_io.extend(res.tool_io)
                if res.done:
                    break
                messages.extend(res.observation)
                if self.tokenizer is not None:
                    obs = self.tokenizer.render_observation(res.observation)
                    ids += obs
                    mask += [0] * len(obs)
                    lps += [0.0] * len(obs)
                else:
                    text_prompt += gen.text + "".join(
                        "\n" + str(m.get("content") or "") for m in res.observation
                    )
            else:
                raise EpisodeFailure("harness_error", f"no final step in {self._max_turns} turns")
        except EpisodeFailure:
            raise
        except PolicyError as e:
            raise EpisodeFailure(f"policy_error:{e.kind}", str(e)) from e
        except TimeoutError as e:
            raise EpisodeFailure(
                "policy_error:timeout", f"model call over {self._model_timeout:g} s"
            ) from e
        except EnvInfraError as e:
            raise EpisodeFailure(e.outcome, e.detail) from e
        except Exception as e:  # an env or policy bug must not kill the run: excluded as ours
            raise EpisodeFailure("harness_error", f"{type(e).__name__}: {e}") from e
        finally:
            await env.close()
            traced.close()
        if res.outcome is None or is_infra(res.outcome):
            reason = res.outcome or "harness_error"
            detail = res.detail or "the final step gave no outcome"
            raise EpisodeFailure(reason, detail)
        timings["total"] = time.perf_counter() - t_start
        return Trajectory(
            env=self.env.name,
            env_digest=self._env_digest,
            task_id=req.task.id,
            task_digest=req.task.digest(),
            group_id=req.group_id,
            index=req.index,
            seed=req.seed,
            policy=self.policy.name,
            params_digest=self.params_digest,
            messages=tuple(messages),
            turns=tuple(turns),
            outcome=res.outcome,
            reward=res.reward,
            detail=res.detail,
            rewards=dict(res.rewards),
            tool_io=tuple(tool_io),
            token_exact=self.tokenizer is not None,
            token_ids=tuple(ids),
            loss_mask=tuple(mask),
            logprobs=tuple(lps),
            timings=timings,
            attempt=req.attempt,
            info=dict(res.info),
            env_options=self.env.options,
            task=task_to_record(req.task),
        )

    async def _generate(
        self, messages: Sequence[Message], text: str, ids: list[int], params: SamplingParams
    ) -> Generation:
        async with asyncio.timeout(self._model_timeout):
            # cast, not isinstance: a runtime Protocol check costs ~25 µs per call (the
            # mode was checked once in __init__), a tenth of the engine's CPU per episode.
            if self.tokenizer is not None:
                gens = await cast(TokenPolicy, self.policy).generate_tokens(list(ids), params)
            else:
                prompt: Any = list(messages) if self.prompt == "chat" else text
                gens = await cast(Policy, self.policy).generate(prompt, params)
        if len(gens) != 1:
            raise EpisodeFailure(
                "policy_error:bad_response", f"asked for 1 sample, got {len(gens)}"
            )
        g = gens[0]
        if self.tokenizer is not None and g.token_ids is None:
            raise EpisodeFailure("harness_error", "token mode: the policy returned no token ids")
        return g


def _first_text(messages: Sequence[Message]) -> str:
    """Completions mode: the user-facing text (system + user contents, in order)."""
    return "\n\n".join(str(m.get("content") or "") for m in messages)
