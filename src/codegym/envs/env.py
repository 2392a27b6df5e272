"""The environment contract, and registration by name.

An environment is one plain class per kind of episode. The engine makes a fresh instance
per episode (so instance attributes are episode state), then:

    first = await env.reset(task, seed)         # the first messages the model sees
    while True:
        turn = <the model's answer to the conversation so far>
        result = await env.step(turn)           # observation, reward, done, info
        if result.done: break
    await env.close()

Contract:
- ``reset`` and ``step`` are async because they may touch the sandbox; they must not sleep
  or poll. ``step`` returns the observation messages appended to the conversation (tool
  results, test feedback), ``done``, and on the final step the episode's ``reward`` and
  ``outcome`` (a name from ``codegym.tasks.outcomes``).
- An infrastructure failure (sandbox ``infra``, a broken tool backend) is *not* a reward:
  the env ends the step with ``outcome="infra"`` (or another infra outcome) and
  ``reward=None``; the engine retries the episode, then excludes it with the reason. An
  env may also raise ``EnvInfraError`` for the same effect.
- A bug in the env (any other exception) ends the episode as ``harness_error``, excluded.
- ``config()`` returns everything that changes the env's behaviour (JSON-able); its digest,
  with the sandbox limits, is stored on every trajectory.

Errors raised here::

    EnvError                 a user's mistake (unknown env name, bad option)
    EnvInfraError            the infrastructure failed during a step (engine retries)
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from codegym.errors import CodegymError
from codegym.policies.policy import Message
from codegym.sandbox import ExecResult, Limits, Sandbox, SandboxAPI, Session
from codegym.store.keys import content_key
from codegym.tasks import DEFAULT_LIMITS, HARNESS_VERSION, Task

__all__ = [
    "ENVS",
    "Env",
    "EnvError",
    "EnvInfraError",
    "Message",
    "Resources",
    "StepResult",
    "Turn",
    "make_env",
    "register",
]


class EnvError(CodegymError, ValueError):
    """A user's mistake with an environment (unknown name, bad option); message says the fix."""


class EnvInfraError(CodegymError):
    """The infrastructure failed inside a step; the engine retries, then excludes."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(f"{outcome}: {detail}")
        self.outcome = outcome
        self.detail = detail


@dataclass(frozen=True)
class Turn:
    """One model turn as the env sees it."""

    text: str
    """The generated text (chat: the assistant content)."""
    finish_reason: str = "stop"
    """``stop``, ``length`` (cut at max_tokens), ``tool_calls``..."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """OpenAI-format tool calls (``{"id", "type", "function": {"name", "arguments"}}``)."""
    tokens_out: int = 0
    """Tokens generated in this turn (for token budgets); 0 when unknown."""


@dataclass(frozen=True)
class StepResult:
    """What one step returns."""

    observation: tuple[Message, ...] = ()
    """Messages appended after the model's turn (tool results, feedback)."""
    done: bool = False
    """The episode is over."""
    reward: float | None = None
    """The episode's reward on the final step; None for infra outcomes or mid-episode."""
    outcome: str | None = None
    """Final step: a name from ``codegym.tasks.outcomes``."""
    detail: str = ""
    """Why (first failing test, infra reason)."""
    rewards: Mapping[str, float] = field(default_factory=dict)
    """Per reward function, before weighting."""
    tool_io: tuple[dict[str, Any], ...] = ()
    """Tool calls run in this step: ``{"id", "name", "arguments", "output", "ok", "seconds"}``."""
    timings: Mapping[str, float] = field(default_factory=dict)
    """Seconds spent per stage inside the step (``sandbox``, ``tool``, ``reward``)."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Free-form per-episode facts (JSON-able), stored on the trajectory."""


class Shell(Protocol):
    """A workspace an agent's tools act in: a local ``Session`` or a sandbox service's
    (``codegym.service.RemoteSession``)."""

    async def run_python(self, code: str) -> ExecResult: ...

    async def run(self, command: str) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, content: str) -> None: ...


class Resources:
    """What environments may use: the shared sandbox pool and per-episode sessions.

    Sessions are bounded by ``max_sessions`` (each is a worker process), so a burst of
    multi-turn episodes waits for a workspace instead of forking without bound.
    """

    def __init__(
        self,
        sandbox: SandboxAPI | None = None,
        *,
        tier: str = "jail",
        limits: Limits | None = None,
        max_sessions: int = 16,
    ) -> None:
        import asyncio

        self.sandbox = sandbox
        self.tier: str = getattr(sandbox, "tier_name", tier)  # a service's client has none
        self.limits = limits
        """Override for every run; None: each task's own limits, else ``DEFAULT_LIMITS``."""
        self._session_slots = asyncio.Semaphore(max_sessions)

    def require_sandbox(self) -> SandboxAPI:
        if self.sandbox is None:
            raise EnvError(
                "this environment runs code: give the engine a Sandbox (Resources(sandbox))"
            )
        return self.sandbox

    def local_pool(self, env: str) -> Sandbox:
        """The sandbox, which must be a local pool (images, workspaces on this host)."""
        if not isinstance(self.sandbox, Sandbox):
            raise EnvError(
                f"the {env} environment needs a local sandbox pool (its images and "
                "workspaces live on this host): drop --sandbox-url"
                if self.sandbox is not None
                else f"the {env} environment runs code: give the engine a Sandbox"
            )
        return self.sandbox

    @asynccontextmanager
    async def session(self, disk_mb: int = 64) -> AsyncIterator[Session]:
        """A fresh workspace for one episode, closed on exit (takes a slot first)."""
        async with self.session_slot(), self.open_session(disk_mb) as s:
            yield s

    @asynccontextmanager
    async def session_slot(self) -> AsyncIterator[None]:
        """One of the ``max_sessions`` slots. An environment that will open a session
        takes its slot before its episode's first step (in ``reset``), never while the
        engine holds one of its step slots for it: a step waiting for a session while the
        episodes that hold the sessions wait for a step slot would deadlock the run."""
        async with self._session_slots:
            yield

    @asynccontextmanager
    async def open_shell(self, disk_mb: int = 64) -> AsyncIterator[Shell]:
        """Like ``open_session``, but on the sandbox service when the sandbox is one (its
        client opens sessions there, ``RemoteSandbox.session``); else a local session."""
        remote = getattr(self.sandbox, "session", None)
        if remote is None:
            async with self.open_session(disk_mb) as s:
                yield s
            return
        s = remote(disk_mb)
        await s.start()
        try:
            yield s
        finally:
            await s.close()

    @asynccontextmanager
    async def open_session(self, disk_mb: int = 64) -> AsyncIterator[Session]:
        """A fresh workspace, closed on exit; the caller holds a ``session_slot``."""
        s = Session(self.tier, disk_mb=disk_mb)
        await s.start()
        try:
            yield s
        finally:
            await s.close()


class Env(ABC):
    """One episode of an environment. Subclass, set ``options`` defaults, implement two methods.

    ``options`` holds the env's configuration (given by the CLI or a config file); unknown
    keys are refused so that a typo is not silently ignored.
    """

    name: ClassVar[str] = ""
    """Set by ``@register``."""
    defaults: ClassVar[Mapping[str, Any]] = {}
    """Option names and their default values."""

    def __init__(self, resources: Resources, **options: Any) -> None:
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise EnvError(
                f"env {self.name or type(self).__name__!r}: unknown option(s) "
                f"{sorted(unknown)}; known: {sorted(self.defaults)}"
            )
        self.resources = resources
        self.options: dict[str, Any] = {**self.defaults, **options}

    @abstractmethod
    async def reset(self, task: Task, seed: int) -> list[Message]:
        """Start an episode on ``task``; return the first messages."""

    @abstractmethod
    async def step(self, turn: Turn) -> StepResult:
        """Apply the model's turn; return what follows."""

    async def close(self) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Release per-episode resources (sessions). Called once, even after a failure."""

    def config(self) -> dict[str, Any]:
        """Everything that changes this env's behaviour (JSON-able)."""
        return {"name": self.name, "options": self.options}

    def digest(self) -> str:
        """Content key of the env's config, sandbox limits and harness version."""
        return content_key(
            "env",
            config=self.config(),
            limits=(self.resources.limits or DEFAULT_LIMITS).to_wire(),
            harness=HARNESS_VERSION,
        )


E = TypeVar("E", bound=type[Env])

ENVS: dict[str, type[Env]] = {}
"""Registered environments by name."""


def register(name: str) -> Callable[[E], E]:
    """Class decorator: make the env findable by ``name`` (it only registers)."""

    def deco(cls: E) -> E:
        if name in ENVS and ENVS[name] is not cls:
            raise EnvError(f"env name {name!r} is taken by {ENVS[name].__qualname__}; pick another")
        cls.name = name
        ENVS[name] = cls
        return cls

    return deco


def make_env(name: str, resources: Resources, **options: Any) -> Env:
    """A fresh env instance by registered name.

    Raises:
        EnvError: unknown name (the message lists the known ones) or bad options.
    """
    cls = ENVS.get(name)
    if cls is None:
        raise EnvError(
            f"unknown env {name!r}; registered: {', '.join(sorted(ENVS)) or 'none'} "
            "(load a file that registers it with --env-file)"
        )
    return cls(resources, **options)


class Stopwatch:
    """Accumulates seconds per stage: ``with sw("sandbox"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, stage: str) -> _Lap:
        return _Lap(self, stage)


class _Lap:
    __slots__ = ("_stage", "_sw", "_t")

    def __init__(self, sw: Stopwatch, stage: str) -> None:
        self._sw, self._stage, self._t = sw, stage, 0.0

    def __enter__(self) -> None:
        self._t = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        s = self._sw.seconds
        s[self._stage] = s.get(self._stage, 0.0) + time.perf_counter() - self._t
