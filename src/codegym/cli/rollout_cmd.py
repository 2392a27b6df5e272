"""``codegym rollout`` and ``codegym replay``: run RL episodes, re-score stored ones.

``rollout`` writes ``DIR/trajectories.jsonl`` (scored episodes), ``DIR/excluded.jsonl``
(episodes not scored, with the reason) and ``DIR/summary.json`` (``requested``, ``scored``,
``excluded`` by reason, faults, timings); with a store, trajectories are also stored by
content key. Exit codes: 0 done, 2 bad input, 3 the circuit breaker stopped the run, 4 the
run is written but ``--mirror`` could not copy it.

``replay`` re-runs each trajectory's recorded turns through its env and prints the
differences; exit 1 when any trajectory differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from codegym._registry import load_plugins
from codegym.cli._common import (
    MetricsPortOption,
    MirrorOption,
    TraceFileOption,
    check_mirror,
    environment_store,
    fail,
    json_object,
    made_from,
    mirror_run,
    mlflow_run,
    open_store,
    start_telemetry,
)
from codegym.envs import ENVS, EnvError, Resources, Trajectory
from codegym.policies import Policy, PolicyError, SamplingParams
from codegym.policies.registry import POLICIES, make_policy
from codegym.rollout import (
    EnvSpec,
    LocalExecutor,
    RolloutAborted,
    RolloutConfig,
    RolloutEngine,
    RolloutError,
    replay_trajectory,
)
from codegym.sandbox import HostUnsupported, Sandbox
from codegym.sandbox.tiers import TIERS
from codegym.store import Store
from codegym.store.records import TrajectoryRecord as StoredTrajectory
from codegym.tasks.synthetic import generate

if TYPE_CHECKING:  # Ray is imported only by runs that use it (``import ray`` costs ~0.7 s)
    from codegym.rollout.ray_executor import RayExecutor, RayOptions


def load_env_file(path: Path) -> None:
    """Import a Python file that registers environments (``@register``)."""
    if not path.is_file():
        fail(f"--env-file {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"codegym_user_env_{path.stem}", path)
    if spec is None or spec.loader is None:
        fail(f"--env-file {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def rollout(
    env: Annotated[str, typer.Option(help="Registered env name (code, tool, or from --env-file).")],
    model: Annotated[str, typer.Option(help="Model name the server serves.")],
    out: Annotated[Path, typer.Option(help="Run folder: trajectories.jsonl, summary.json.")],
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL, e.g. .../v1 (--policy openai).")
    ] = None,
    policy_name: Annotated[
        str,
        typer.Option(
            "--policy",
            help=f"A registered policy: {POLICIES.choices()} (openai, the default: a server).",
        ),
    ] = "openai",
    policy_options: Annotated[
        str, typer.Option(help="The policy's own options as a JSON object.")
    ] = "{}",
    groups: Annotated[int, typer.Option(help="GRPO groups (one task each).")] = 8,
    group_size: Annotated[int, typer.Option(help="Episodes per group.")] = 8,
    env_file: Annotated[
        list[Path] | None, typer.Option(help="Python file registering envs.")
    ] = None,
    env_options: Annotated[str, typer.Option(help="Env options as a JSON object.")] = "{}",
    suite: Annotated[
        str | None,
        typer.Option(
            help="Tasks from a suite instead of a synthetic family: humaneval, synth:..., or a "
            "dataset file (repository tasks included, for --env repo); the first GROUPS tasks."
        ),
    ] = None,
    family: Annotated[str, typer.Option(help="Synthetic task family.")] = "infer",
    difficulty: Annotated[int, typer.Option(help="Synthetic task difficulty.")] = 1,
    task_seed: Annotated[int, typer.Option(help="Seed of the synthetic tasks.")] = 1,
    mode: Annotated[str, typer.Option(help="chat or completions.")] = "chat",
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Max new tokens per model turn.")] = 512,
    seed: Annotated[int, typer.Option(help="Run seed (episode seeds derive from it).")] = 0,
    model_concurrency: Annotated[int, typer.Option(help="Model requests in flight.")] = 256,
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    workers: Annotated[int | None, typer.Option(help="Sandbox workers (default: CPUs).")] = None,
    retries: Annotated[int, typer.Option(help="Retries of an episode after an infra failure.")] = 2,
    straggler_s: Annotated[
        float | None, typer.Option(help="Straggler deadline after quorum.")
    ] = None,
    breaker_threshold: Annotated[
        int, typer.Option(help="Failed attempts in a row that stop the run.")
    ] = 50,
    api_key: Annotated[str | None, typer.Option(help="API key (default: $OPENAI_API_KEY).")] = None,
    store: Annotated[
        Path | None, typer.Option(help="Result store (DuckDB); default $CODEGYM_STORE.")
    ] = None,
    no_store: Annotated[bool, typer.Option(help="Store nothing.")] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Run episodes on Ray actors: local (start one here), auto or ray://HOST:PORT "
            "(join a cluster). Absent: local asyncio."
        ),
    ] = None,
    ray_actors: Annotated[
        int, typer.Option(help="Ray worker actors, each with its own sandbox pool.")
    ] = 2,
    mlflow: Annotated[bool, typer.Option(help="Track the run in MLflow.")] = False,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default ./mlruns).")
    ] = None,
    metrics_port: MetricsPortOption = None,
    trace_file: TraceFileOption = None,
    mirror: MirrorOption = None,
) -> None:
    """Run GROUPS × GROUP_SIZE episodes of an env against a model server; write a run folder."""
    check_mirror(mirror)
    start_telemetry(metrics_port, trace_file)
    for f in env_file or []:
        load_env_file(f)
    if env not in ENVS:
        fail(
            f"--env {env!r}: not registered; known: {', '.join(sorted(ENVS))} (or pass --env-file)"
        )
    options = json_object(env_options, "--env-options")
    if mode not in ("chat", "completions"):
        fail(f"--mode {mode!r}: use chat or completions")
    try:
        tasks = _tasks(suite, groups) if suite else generate(family, groups, task_seed, difficulty)
        images = _images_for(tasks, suite) if suite else None
        if images is not None and ray_address is not None:
            fail(
                "tasks that run in images (repository tasks, environments) run on the local "
                "executor only for now: drop --ray-address"
            )
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
        cfg = RolloutConfig(
            group_size=group_size,
            model_concurrency=model_concurrency,
            retries=retries,
            straggler_s=straggler_s,
            breaker_threshold=breaker_threshold,
            seed=seed,
        )
        tools = getattr(ENVS[env], "tools", None) if mode == "chat" else None
        ray_opts: RayOptions | None = None
        if ray_address is not None:
            from codegym.rollout.ray_executor import RayOptions, per_actor

            ray_opts = RayOptions(address=ray_address, actors=ray_actors)
        # a factory: each Ray actor builds its own policy (a live client cannot be pickled)
        policy_factory = partial(
            make_policy,
            policy_name,
            model=model,
            base_url=base_url,
            mode=mode,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            tools=tools,
            **json_object(policy_options, "--policy-options"),
        )
        policy = policy_factory(concurrency=model_concurrency)
        if ray_opts is not None:
            policy_factory = partial(  # the actors share the run's model concurrency
                policy_factory, concurrency=per_actor(model_concurrency, ray_actors)
            )
    except (PolicyError, RolloutError) as e:
        fail(str(e))
    plugins = tuple(load_plugins())  # the Ray actors import them too
    run = _Run(
        tier, workers, ray_opts, policy_factory, tuple(env_file or ()), mode, plugins, images
    )
    tracked = {"env": env, "env_options": options, "model": model, "base_url": base_url,
               "policy": policy_name,
               "suite": suite or f"synth:{family}", "groups": groups, "group_size": group_size,
               "temperature": temperature, "max_tokens": max_tokens, "seed": seed}  # fmt: skip
    with open_store(store, no_store) as st, mlflow_run(mlflow, mlflow_uri, f"rollout-{env}",
                                                       tracked) as mf:  # fmt: skip
        try:
            lineage = _model_lineage(model)
            summary = asyncio.run(
                _rollout(EnvSpec(env, options), policy, params, cfg, tasks, run, out, st, lineage)
            )
        except (HostUnsupported, EnvError, RolloutError) as e:
            fail(str(e))
        if mf is not None:
            nums = {k: float(v) for k, v in summary.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}  # fmt: skip
            mf.log_metrics(nums)
            mf.log_artifact(out / "summary.json")
    typer.echo(json.dumps(summary, indent=2))
    mirror_run(out, mirror)
    if summary.get("aborted"):
        fail(summary["aborted"], code=3)


def _model_lineage(model: str | None) -> dict[str, Any] | None:
    """Where a codegym-trained local model came from (its ``lineage.json``), so the rollout
    folder records the checkpoint it used; None for any other model."""
    path = Path(model) / "lineage.json" if model else None
    if path is None or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        fail(f"{path}: unreadable ({e}); restore it, or delete it if the model is not codegym's")
    if not isinstance(record, dict):
        fail(f"{path}: not a codegym lineage record; restore it or delete it")
    return {"model_dir": model, **made_from(record)}


def _tasks(suite: str, groups: int) -> list[Any]:
    """The first ``groups`` tasks of ``suite`` (any spec ``load_suite`` takes)."""
    from codegym.tasks import DatasetError, load_suite

    try:
        ts = load_suite(suite)
    except DatasetError as e:
        fail(str(e))
    if len(ts.tasks) < groups:
        fail(f"--suite {suite} has {len(ts.tasks)} tasks; ask for at most that many --groups")
    return list(ts.tasks[:groups])


def _images_for(tasks: list[Any], suite: str) -> Any:
    """The image cache, with every image the repository tasks start from (built from their
    specs where missing) or the environments tasks run in (``Task.image``, built when a
    first episode scores); None when the tasks need neither."""
    if not any(getattr(t, "repo", "") for t in tasks):
        return environment_store(tasks)
    from codegym.sandbox.images import ImageError, ImageStore
    from codegym.tasks import DatasetError
    from codegym.tasks.swe.files import task_file
    from codegym.tasks.swe.score import ensure_images
    from codegym.tasks.swe.task import swe_of

    store = ImageStore()
    try:
        ensure_images([swe_of(t) for t in tasks], store, task_file(suite) or Path(suite))
    except (DatasetError, ImageError) as e:
        fail(str(e))
    return store


def load_env_files(paths: tuple[Path, ...], plugins: tuple[str, ...] = ()) -> None:
    """Import the plug-ins and register the envs of ``--env-file`` files (run again inside
    each Ray actor)."""
    load_plugins(plugins)
    for f in paths:
        load_env_file(f)


@dataclass(frozen=True)
class _Run:
    """Where episodes run: the sandbox, and Ray when ``ray`` is set."""

    tier: str
    workers: int | None
    ray: RayOptions | None
    policy_factory: Callable[..., Policy]
    env_files: tuple[Path, ...]
    mode: str
    """chat or completions: what the policy is sent."""
    plugins: tuple[str, ...] = ()
    """Plug-in modules named by $CODEGYM_PLUGINS and --plugin (loaded in Ray actors too)."""
    images: Any = None
    """The image cache, when the tasks are repository tasks."""


async def _rollout(
    spec: EnvSpec,
    policy: Policy,
    params: SamplingParams,
    cfg: RolloutConfig,
    tasks: list[Any],
    run: _Run,
    out: Path,
    store: Store | None,
    lineage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    run_id = out.resolve().name
    summary: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        ex: LocalExecutor | RayExecutor
        ray_ex: RayExecutor | None = None
        if run.ray is None:
            sb = await stack.enter_async_context(
                Sandbox(tier=run.tier, workers=run.workers, images=run.images)
            )
            if hasattr(policy, "__aenter__"):  # HTTP clients hold a session
                await stack.enter_async_context(policy)  # type: ignore[arg-type]
            elif (close := getattr(policy, "aclose", None)) is not None:
                stack.push_async_callback(close)
            resources = Resources(sb, tier=run.tier)
            spec.make(resources)  # validate the options before any request
            ex = LocalExecutor(
                spec,
                policy,
                params,
                resources,
                prompt=run.mode,
                model_concurrency=cfg.model_concurrency,
                env_concurrency=2 * sb.size,
            )
            executor_info: dict[str, Any] = {"kind": "local"}
        else:
            from codegym.rollout.ray_executor import RayExecutor, SandboxSpec, per_actor

            spec.make(Resources(None, tier=run.tier))  # validate the options before Ray starts
            workers = run.workers or 1
            ex = RayExecutor(
                spec,
                run.policy_factory,
                params,
                sandbox=SandboxSpec(tier=run.tier, workers=workers),
                ray_options=run.ray,
                prompt=run.mode,
                model_concurrency=per_actor(cfg.model_concurrency, run.ray.actors),
                env_concurrency=2 * workers,
                worker_setup=partial(load_env_files, run.env_files, run.plugins)
                if run.env_files or run.plugins
                else None,
            )
            ray_ex = await stack.enter_async_context(ex)
            executor_info = {"kind": "ray", "address": run.ray.address, "actors": run.ray.actors}
        engine = RolloutEngine(ex, cfg, env=spec.name)
        with (out / "trajectories.jsonl").open("w") as tf, (out / "excluded.jsonl").open("w") as xf:
            try:
                async for g in engine.run(tasks):
                    rows = [t.to_record() for t in g.trajectories]
                    for r in rows:
                        tf.write(json.dumps(r) + "\n")
                    for e in g.excluded:
                        xf.write(
                            json.dumps(
                                {
                                    "group_id": g.group_id,
                                    "task_id": g.task.id,
                                    "index": e.index,
                                    "reason": e.reason,
                                    "detail": e.detail,
                                    "attempts": e.attempts,
                                }
                            )
                            + "\n"
                        )
                    if store is not None and g.trajectories:
                        store.put_trajectories([_stored(t, run_id) for t in g.trajectories])
            except RolloutAborted as e:
                summary["aborted"] = e.diagnosis
        if ray_ex is not None:
            executor_info.update(ray_ex.stats)
    summary = {
        **engine.stats.summary(),
        **summary,
        "env": spec.name,
        "executor": executor_info,
        "config": {
            "env_options": spec.options,
            "group_size": cfg.group_size,
            "seed": cfg.seed,
            "policy": policy.name,
            "params": params.to_dict(),
            "lineage": lineage,
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _stored(t: Trajectory, run_id: str) -> StoredTrajectory:
    return StoredTrajectory(t.key(), t.to_record(), run_id, t.task_id, t.reward, t.outcome)


def replay(
    source: Annotated[Path, typer.Argument(help="A rollout folder or a trajectories.jsonl file.")],
    env_file: Annotated[
        list[Path] | None, typer.Option(help="Python file registering envs.")
    ] = None,
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    limit: Annotated[int | None, typer.Option(help="Only the first N trajectories.")] = None,
) -> None:
    """Re-score stored trajectories by replaying their turns; exit 1 if any differ."""
    for f in env_file or []:
        load_env_file(f)
    path = source / "trajectories.jsonl" if source.is_dir() else source
    if not path.is_file():
        fail(f"{source}: no trajectories.jsonl there; give a rollout folder or the file")
    try:
        trajs = [Trajectory.from_record(json.loads(line)) for line in path.open() if line.strip()]
    except ValueError as e:
        fail(f"{path}: {e}")
    trajs = trajs[:limit] if limit is not None else trajs
    try:
        report = asyncio.run(_replay(trajs, tier))
    except (HostUnsupported, EnvError) as e:
        fail(str(e))
    typer.echo(json.dumps(report, indent=2))
    if report["different"]:
        raise typer.Exit(1)


async def _replay(trajs: list[Trajectory], tier: str) -> dict[str, Any]:
    async with Sandbox(tier=tier) as sb:
        res = Resources(sb, tier=tier)
        diffs = await asyncio.gather(*(replay_trajectory(t, res) for t in trajs))
    bad = [d.to_record() for d in diffs if not d.same]
    return {
        "replayed": len(diffs),
        "same": len(diffs) - len(bad),
        "different": len(bad),
        "diffs": bad,
    }
