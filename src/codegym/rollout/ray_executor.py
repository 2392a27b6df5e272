"""``RayExecutor``: the executor seam on Ray actors, for when one machine is not enough.

    async with RayExecutor(EnvSpec("code"), partial(OpenAIPolicy, url, model, mode="chat"),
                           params, ray=RayOptions(actors=4)) as ex:
        engine = RolloutEngine(ex, config)
        async for group in engine.run(tasks): ...

Each actor is an async Ray actor that owns one sandbox pool, one policy client and a
``LocalExecutor`` (so an episode runs exactly the code path it runs locally: the
trajectories of the two executors are the same for the same inputs). The engine stays in
the driver: groups, retries, stragglers, staleness and accounting do not change.

Contract:
- **Dispatch**: an attempt goes to the actor with the fewest episodes in flight; each
  actor holds at most ``RayOptions.slots_per_actor``. When all are full, the attempt waits
  in the driver (FIFO), so back-pressure reaches the engine instead of Ray's queues.
- **Results stream back** one by one: ``run_episode`` returns the actor's ``Trajectory`` or
  raises ``EpisodeFailure`` with the actor's infra reason, exactly as ``LocalExecutor``.
- **Actor death** (``RayActorError``: killed, OOM, node lost): the dead actor is replaced
  (up to ``max_actor_restarts`` over the run) and each of its in-flight attempts is sent
  again, with the same request and seed, to a live actor (up to ``redispatch`` times per
  attempt, then ``EpisodeFailure("infra")``, which the engine retries and excludes). The
  engine sees one return per attempt, so an episode is never lost or counted twice; a
  result that a dying actor computed but did not deliver is simply recomputed. A
  replacement takes work only once it is ready; one the cluster cannot place (the node
  died and no other has room) is given up after ``replace_timeout_s`` and its slot
  retired, logging the cluster's free resources, so the run goes on on the live actors,
  and when none is left every attempt fails as ``infra`` at once (the engine then excludes
  and, past its breaker, ends the run with a diagnosis): a rollout never hangs on an
  actor that cannot come back.
- **Cancellation** (stragglers, abort): the remote task is cancelled too (``ray.cancel``),
  which frees the actor's slot and closes the episode's env.
- **Ray itself**: ``address=None``/``"local"`` starts a local instance (and shuts it down
  on ``close``); ``"auto"`` or ``"ray://host:port"`` joins a cluster (left running). If Ray
  is already initialised in this process it is used as is and left running.
- **What crosses the process boundary**: the ``EnvSpec``, a *policy factory* (a live HTTP
  client cannot be pickled; e.g. ``functools.partial(OpenAIPolicy, url, model)``), the
  sampling params, a ``SandboxSpec``, each ``EpisodeRequest`` and each ``Trajectory``. On a
  cluster every node needs codegym installed; envs registered from user files need
  ``worker_setup`` (a picklable callable run once in each actor) to register them there.
- **Policy versions** are read in the driver at dispatch time and recorded on the turns
  (a local executor reads them at model-call time; with a fixed version they agree).

Errors: a bad option is ``RolloutError`` (message says the fix); an actor that cannot be
placed in ``start_timeout_s`` is ``RolloutError`` naming the cluster's free resources.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions

from codegym.envs.env import ENVS, Resources
from codegym.envs.tokens import Tokenizer, TokenPolicy
from codegym.envs.trajectory import Trajectory
from codegym.policies.policy import Policy, SamplingParams
from codegym.rollout.config import RolloutError
from codegym.rollout.executor import EnvSpec, EpisodeFailure, EpisodeRequest, LocalExecutor
from codegym.rollout.tracker import EpisodeTracker
from codegym.sandbox import Limits, Sandbox

__all__ = ["RayExecutor", "RayOptions", "SandboxSpec", "per_actor"]

log = logging.getLogger("codegym.rollout")

_ADDRESS = re.compile(r"(ray://)?[\w.\-]+:\d+")

PolicyFactory = Callable[[], Policy | TokenPolicy]


@dataclass(frozen=True)
class SandboxSpec:
    """The sandbox pool each actor starts (in its own process)."""

    tier: str = "jail"
    """``jail``, ``gvisor`` or ``process``."""
    workers: int | None = 1
    """Sandbox workers per actor; None: the node's CPU count."""
    limits: Limits | None = None
    """Override for every run; None: each task's own limits."""
    max_sessions: int = 16
    """Sandbox sessions (multi-turn workspaces) per actor."""


@dataclass(frozen=True)
class RayOptions:
    """Where the actors run and how many episodes each holds."""

    address: str | None = None
    """None or ``"local"``: start a local Ray instance; ``"auto"`` or ``"ray://host:port"``:
    join a cluster."""
    actors: int = 2
    """Worker actors (each with its own sandbox pool and policy client)."""
    slots_per_actor: int = 64
    """Episode attempts in flight per actor."""
    actor_cpus: float = 1.0
    """CPUs Ray reserves per actor (its sandbox workers use them)."""
    num_cpus: int | None = 2
    """CPUs of a local instance (ignored when joining a cluster)."""
    redispatch: int = 3
    """Times one attempt is sent again after its actor died, before it fails as ``infra``."""
    max_actor_restarts: int = 8
    """Dead actors replaced over the run; past it a dead actor's capacity is gone."""
    start_timeout_s: float = 120.0
    """Bound on starting an actor (placement, sandbox start)."""
    replace_timeout_s: float = 60.0
    """Bound on placing and starting a replacement for a dead actor; then its slot retires."""
    close_timeout_s: float = 10.0
    """Bound on an actor's clean shutdown before it is killed."""
    log_to_driver: bool = False
    """Forward actor stdout/stderr to this process (off: keeps CLI output clean)."""
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    """More ``ray.init`` arguments (e.g. ``runtime_env``)."""

    def __post_init__(self) -> None:
        for name in ("actors", "slots_per_actor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RolloutError(f"RayOptions.{name}={v!r}: use an int >= 1")
        if self.redispatch < 0 or self.max_actor_restarts < 0:
            raise RolloutError("RayOptions.redispatch and max_actor_restarts must be >= 0")
        if self.actor_cpus < 0:
            raise RolloutError(f"RayOptions.actor_cpus={self.actor_cpus!r}: use >= 0")
        a = self.address
        if a is not None and a not in ("local", "auto") and not _ADDRESS.fullmatch(a):
            raise RolloutError(
                f"ray address {a!r}: use auto, local, ray://HOST:PORT or HOST:PORT (the head's "
                "GCS address)"
            )


@dataclass(frozen=True)
class _Failed:
    """An attempt's infra failure, returned as data (a raised error would be wrapped)."""

    reason: str
    detail: str


@dataclass(frozen=True)
class _WorkerConfig:
    """Everything an actor needs to build its ``LocalExecutor`` (pickled once per actor)."""

    env: EnvSpec
    policy_factory: PolicyFactory
    params: SamplingParams
    sandbox: SandboxSpec
    prompt: str
    tokenizer_factory: Callable[[], Tokenizer] | None
    model_concurrency: int
    env_concurrency: int
    model_timeout_s: float
    max_turns: int
    worker_setup: Callable[[], None] | None


class _EpisodeWorker:
    """The actor body: one event loop, one sandbox pool, one policy, one LocalExecutor."""

    def __init__(self, cfg: _WorkerConfig) -> None:
        self._cfg = cfg
        self._version = 0
        self._tracker = EpisodeTracker()
        self._sandbox: Sandbox | None = None
        self._policy: Policy | TokenPolicy | None = None
        self._executor: LocalExecutor | None = None
        self._start: asyncio.Lock | None = None  # made in the actor's own loop

    async def ready(self) -> str:
        """Start the sandbox and policy (in the actor's loop); returns ``host:pid``.

        Episodes arrive concurrently (an async actor), and the first ones all find nothing
        started: one of them starts it while the others wait. (Without the lock each
        started a pool of its own, and an episode could meet one not started yet: CI saw
        ``SandboxClosed`` under load, on the actor that replaced a killed one.)
        """
        if self._start is None:
            self._start = asyncio.Lock()
        async with self._start:
            if self._executor is None:
                await self._start_executor()
        return f"{socket.gethostname()}:{os.getpid()}"

    async def _start_executor(self) -> None:
        cfg = self._cfg
        if cfg.worker_setup is not None:
            cfg.worker_setup()
        self._sandbox = Sandbox(tier=cfg.sandbox.tier, workers=cfg.sandbox.workers)
        await self._sandbox.start()
        self._policy = cfg.policy_factory()
        resources = Resources(
            self._sandbox,
            tier=cfg.sandbox.tier,
            limits=cfg.sandbox.limits,
            max_sessions=cfg.sandbox.max_sessions,
        )
        self._executor = LocalExecutor(
            cfg.env,
            self._policy,
            cfg.params,
            resources,
            prompt=cfg.prompt,
            tokenizer=cfg.tokenizer_factory() if cfg.tokenizer_factory else None,
            model_concurrency=cfg.model_concurrency,
            env_concurrency=cfg.env_concurrency,
            model_timeout_s=cfg.model_timeout_s,
            max_turns=cfg.max_turns,
            version=lambda: self._version,
        )

    async def run(self, req: EpisodeRequest, version: int) -> Trajectory | _Failed:
        await self.ready()
        assert self._executor is not None
        self._version = max(self._version, version)
        self._tracker.start(req.episode_id, req.task.id)
        try:
            return await self._executor.run_episode(req, self._tracker)
        except EpisodeFailure as f:
            return _Failed(f.reason, f.detail)
        finally:
            self._tracker.finish(req.episode_id)

    async def report(self) -> str:
        return self._tracker.report()

    async def close(self) -> None:
        policy, self._policy, sandbox, self._sandbox = self._policy, None, self._sandbox, None
        closer = getattr(policy, "aclose", None)
        if closer is not None:
            await closer()
        if sandbox is not None:
            await sandbox.close()


class RayExecutor:
    """Runs episode attempts on Ray actors (see the module docstring for the contract).

    Concurrency bounds ``model_concurrency`` and ``env_concurrency`` apply per actor.
    """

    def __init__(
        self,
        env: EnvSpec,
        policy_factory: PolicyFactory,
        params: SamplingParams,
        *,
        sandbox: SandboxSpec | None = None,
        ray_options: RayOptions | None = None,
        prompt: str = "chat",
        tokenizer_factory: Callable[[], Tokenizer] | None = None,
        model_concurrency: int = 512,
        env_concurrency: int = 8,
        model_timeout_s: float = 600.0,
        max_turns: int = 64,
        version: Callable[[], int] | None = None,
        worker_setup: Callable[[], None] | None = None,
    ) -> None:
        if prompt not in ("chat", "completions"):
            raise RolloutError(f"prompt={prompt!r}: use 'chat' or 'completions'")
        if worker_setup is None or env.name in ENVS:  # else it registers in the actors
            env.check()
        if not callable(policy_factory):
            raise RolloutError(
                "RayExecutor needs a policy *factory* (a live client cannot cross processes): "
                "pass e.g. functools.partial(OpenAIPolicy, base_url, model)"
            )
        self.env = env
        self.options = ray_options or RayOptions()
        self._cfg = _WorkerConfig(
            env,
            policy_factory,
            params,
            sandbox or SandboxSpec(),
            prompt,
            tokenizer_factory,
            model_concurrency,
            env_concurrency,
            model_timeout_s,
            max_turns,
            worker_setup,
        )
        self._version = version
        n = self.options.actors
        self._handles: list[Any] = []
        self._gen = [0] * n
        """Bumped when slot i gets a new actor: only the first death report replaces it."""
        self._alive = [True] * n
        self._replacing = [False] * n
        """Slot i waits for a replacement actor to be ready (takes no work meanwhile)."""
        self._busy = [0] * n
        self._replacements: set[asyncio.Task[None]] = set()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._owns_ray = False
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        self._remote_cls: Any = None
        self.stats: dict[str, int] = {
            "actor_deaths": 0, "actor_restarts": 0, "redispatched": 0, "slots_retired": 0,
        }  # fmt: skip
        """Executor-level counts (the engine's own stats do not see re-dispatches)."""

    # ---- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> RayExecutor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def actors(self) -> list[Any]:
        """The current actor handles (tests kill them; a replaced one is a new handle)."""
        return list(self._handles)

    async def start(self) -> None:
        """Connect to (or start) Ray and start every actor.

        Raises:
            RolloutError: an actor could not be placed or started in ``start_timeout_s``.
        """
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            self._owns_ray = _connect(self.options)
            self._remote_cls = ray.remote(_EpisodeWorker)
            self._handles = [self._spawn() for _ in range(self.options.actors)]
            try:
                await asyncio.gather(*(self._await_ready(h) for h in self._handles))
            except BaseException:
                await self.close()
                raise
            self._started = True

    async def close(self) -> None:
        """Close every actor's sandbox and policy, kill the actors, stop Ray if ours."""
        handles, self._handles = self._handles, []
        self._started = False
        for t in list(self._replacements):
            t.cancel()
        if handles:
            closes = [h.close.remote() for h in handles]
            try:
                async with asyncio.timeout(self.options.close_timeout_s):
                    await asyncio.gather(*closes, return_exceptions=True)
            except TimeoutError:
                log.warning("ray executor: actors did not close in time; killing them")
            for h in handles:
                _kill(h)
        for w in self._waiters:
            if not w.done():
                w.set_exception(EpisodeFailure("infra", "the Ray executor was closed"))
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False

    def _spawn(self) -> Any:
        o = self.options
        return self._remote_cls.options(
            num_cpus=o.actor_cpus,
            # async actor: its own loop runs this many calls at once (+ ready/report/close)
            max_concurrency=o.slots_per_actor + 4,
            max_restarts=0,
            max_task_retries=0,
        ).remote(self._cfg)

    async def _await_ready(self, handle: Any) -> str:
        try:
            async with asyncio.timeout(self.options.start_timeout_s):
                where: str = await handle.ready.remote()
                return where
        except TimeoutError:
            raise RolloutError(
                f"a Ray actor did not start in {self.options.start_timeout_s:g} s; the cluster "
                f"has {_resources()}. Lower "
                "RayOptions.actors or actor_cpus, or add nodes"
            ) from None
        except ray.exceptions.RayError as e:
            raise RolloutError(f"a Ray actor failed to start: {_short(e)}") from e

    # ---- the Executor interface ---------------------------------------------------------

    def current_version(self) -> int:
        return int(self._version()) if self._version is not None else 0

    async def run_episode(self, req: EpisodeRequest, tracker: EpisodeTracker) -> Trajectory:
        """One attempt on some actor; re-dispatched if that actor dies.

        Raises:
            EpisodeFailure: the actor's infra reason, or ``infra`` when actors kept dying.
        """
        if not self._started:
            await self.start()
        last = ""
        for k in range(self.options.redispatch + 1):
            slot = await self._acquire()
            gen = self._gen[slot]
            tracker.stage(req.episode_id, f"ray_actor{slot}")
            ref = self._handles[slot].run.remote(req, self.current_version())
            try:
                out: Trajectory | _Failed = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)  # frees the actor's slot and closes the episode's env
                raise
            except ray.exceptions.RayActorError as e:
                last = _short(e)
                self._on_death(slot, gen, last)
                if k < self.options.redispatch:
                    self.stats["redispatched"] += 1
                continue
            except ray.exceptions.RayError as e:  # e.g. the result could not be pickled
                raise EpisodeFailure("harness_error", f"ray: {_short(e)}") from e
            finally:
                self._release(slot)
            if isinstance(out, _Failed):
                raise EpisodeFailure(out.reason, out.detail)
            return out
        raise EpisodeFailure(
            "infra",
            f"the Ray actor died under this attempt {self.options.redispatch + 1} times"
            f"; last: {last}",
        )

    async def report(self) -> dict[int, str]:
        """Each live actor's own in-flight report (stage per episode), by slot."""
        reports = await asyncio.gather(
            *(h.report.remote() for h in self._handles), return_exceptions=True
        )
        return {i: r if isinstance(r, str) else f"unreachable: {r}" for i, r in enumerate(reports)}

    # ---- slots ------------------------------------------------------------------------

    def _pick(self) -> int | None:
        cap = self.options.slots_per_actor
        best: int | None = None
        for i, busy in enumerate(self._busy):
            if self._alive[i] and busy < cap and (best is None or busy < self._busy[best]):
                best = i
        return best

    async def _acquire(self) -> int:
        while True:
            i = self._pick()
            if i is not None:
                self._busy[i] += 1
                return i
            if not any(self._alive) and not any(self._replacing):
                raise EpisodeFailure(
                    "infra",
                    "every Ray actor died and none can be replaced (restarts used up, "
                    "RayOptions.max_actor_restarts, or no room in the cluster: "
                    f"{_resources()})",
                )
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # woken and cancelled at once: hand the wake-up on, or a slot sits idle
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)
                raise

    def _release(self, slot: int) -> None:
        self._busy[slot] -= 1
        self._wake(1)

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                n -= 1

    def _on_death(self, slot: int, gen: int, why: str) -> None:
        """First report of slot's actor dying: replace it (or retire the slot)."""
        if self._gen[slot] != gen or not self._handles:
            return  # already replaced (another in-flight attempt saw the same death)
        self._gen[slot] += 1
        self.stats["actor_deaths"] += 1
        dead = self._handles[slot]
        self._alive[slot] = False  # no work until a replacement is ready
        _kill(dead)  # an "unavailable" actor may come back: make sure it cannot answer
        if self.stats["actor_restarts"] < self.options.max_actor_restarts:
            self.stats["actor_restarts"] += 1
            self._replacing[slot] = True
            task = asyncio.ensure_future(self._replace(slot, self._gen[slot], why))
            self._replacements.add(task)
            task.add_done_callback(self._replacements.discard)
        else:
            log.error("ray executor: actor %d died (%s); no restarts left", slot, why)
            self.stats["slots_retired"] += 1
            self._wake(len(self._waiters))  # let waiters see whether any actor is left

    async def _replace(self, slot: int, gen: int, why: str) -> None:
        """Start a replacement for slot's dead actor; retire the slot if the cluster cannot
        place it within ``replace_timeout_s`` (the node is gone and no other has room)."""
        handle = None
        try:
            async with asyncio.timeout(self.options.replace_timeout_s):
                handle = self._spawn()
                await handle.ready.remote()
        except Exception as e:  # noqa: BLE001 - not placed, failed to start, or Ray failed
            if handle is not None:
                _kill(handle)
            self._replacing[slot] = False
            self.stats["slots_retired"] += 1
            what = "not placed" if isinstance(e, TimeoutError) else f"failed: {_short(e)}"
            log.error(
                "ray executor: actor %d died (%s) and its replacement was %s in %g s; "
                "retired the slot, going on with %d live actors; the cluster has %s",
                slot, why, what, self.options.replace_timeout_s, sum(self._alive), _resources(),
            )  # fmt: skip
            self._wake(len(self._waiters))  # waiters see what is left (or that nothing is)
            return
        if self._gen[slot] != gen or not self._handles:  # closed meanwhile
            _kill(handle)
            return
        self._handles[slot] = handle
        self._replacing[slot] = False
        self._alive[slot] = True
        log.warning("ray executor: actor %d died (%s); replaced it", slot, why)
        self._wake(self.options.slots_per_actor)


def _connect(opts: RayOptions) -> bool:
    """Initialise Ray per ``opts``; True when this call started it (so close stops it)."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"log_to_driver": opts.log_to_driver, **opts.init_kwargs}
    if opts.address in (None, "local"):
        ray.init(num_cpus=opts.num_cpus, include_dashboard=False, **kw)
        return True
    tries = 3 if opts.address.startswith("ray://") else 1
    for attempt in range(1, tries + 1):
        try:
            ray.init(address=opts.address, **kw)
            return True
        except ConnectionAbortedError as e:
            # the client proxy starts a server process per client, and that start can
            # fail (a gRPC poller dying at start-up on a loaded machine): a new client
            # gets a new one, so try again before giving up
            if attempt == tries:
                raise
            log.warning("ray executor: %s failed (%s); trying again", opts.address, _short(e))
            ray.shutdown()
            time.sleep(2.0 * attempt)
    return True


def _resources() -> str:
    """The cluster's CPUs for a message; never raises (it is called on failure paths)."""
    try:
        free: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
        total: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    except Exception as e:  # noqa: BLE001 - a message on a failure path must not fail
        return f"unknown free CPUs (Ray did not say: {_short(e, 120)})"
    return f"{free.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs free"


def _kill(handle: Any) -> None:
    """``ray.kill`` that cannot fail its caller: a death or a replacement must be handled
    to the end (a raise here left a dead actor's slot open, or a slot neither replaced
    nor retired)."""
    try:
        ray.kill(handle)
    except Exception as e:  # noqa: BLE001 - logged; the death is handled regardless
        log.warning("ray executor: could not kill an actor: %s", _short(e))


def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:limit]}"


def per_actor(total: int, actors: int) -> int:
    """Split a run-wide concurrency bound across actors (at least 1 each)."""
    return max(1, math.ceil(total / actors))
