"""``codegym eval``: sample an OpenAI-compatible server on a suite, score, summarize."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from codegym.cli._common import (
    FormatOption,
    MetricsPortOption,
    MirrorOption,
    SinceOption,
    TraceFileOption,
    check_ground_truth,
    check_mirror,
    fail,
    finish_in_store,
    json_object,
    made_from,
    mirror_run,
    mlflow_run,
    open_sandbox,
    open_store,
    start_telemetry,
)
from codegym.cli._progress import score_progress
from codegym.cli.score_cmd import _print_summary
from codegym.envs import ENVS, EnvError
from codegym.evals.rundir import build_summary, write_run
from codegym.evals.runner import Runner, RunnerConfig, SampleResult, quarantined_results
from codegym.policies import Policy, PolicyError, SamplingParams
from codegym.policies.registry import POLICIES
from codegym.rollout import EnvSpec, RolloutAborted, RolloutError
from codegym.sandbox import HostUnsupported
from codegym.sandbox.tiers import TIERS
from codegym.store import DictCache, Store
from codegym.tasks import DatasetError, Task, load_suite

if TYPE_CHECKING:
    pass


def eval_(
    suite: Annotated[str, typer.Option(help="Suite name (humaneval, synth:...) or JSONL path.")],
    model: Annotated[str, typer.Option(help="Model name the server serves.")],
    out: Annotated[Path, typer.Option(help="Run folder: results.jsonl and summary.json.")],
    fmt: FormatOption = None,
    since: SinceOption = None,
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
    n: Annotated[int, typer.Option("-n", help="Samples (episodes, with --env) per task.")] = 1,
    env: Annotated[
        str | None,
        typer.Option(
            help="Run each sample as an episode of this multi-turn env (repo, tool, code): "
            "an agent with tools; repository tasks need it."
        ),
    ] = None,
    env_options: Annotated[str, typer.Option(help="Env options as a JSON object.")] = "{}",
    mode: Annotated[str, typer.Option(help="completions or chat.")] = "completions",
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.8,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 0.95,
    max_tokens: Annotated[int, typer.Option(help="Max new tokens per sample.")] = 512,
    seed: Annotated[int | None, typer.Option(help="Sampling seed, passed to the server.")] = None,
    api_key: Annotated[
        str | None, typer.Option(help="API key (default: $OPENAI_API_KEY).", show_default=False)
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    model_concurrency: Annotated[int, typer.Option(help="Model requests in flight.")] = 32,
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    workers: Annotated[int | None, typer.Option(help="Sandbox workers (default: CPUs).")] = None,
    sandbox_url: Annotated[
        list[str] | None,
        typer.Option(help="Score on the sandbox service at this URL (repeat for a pool)."),
    ] = None,
    ground_truth: Annotated[
        bool,
        typer.Option(help="Run every reference first: quarantine broken tasks, size CPU limits."),
    ] = True,
    flaky_repeats: Annotated[
        int, typer.Option(help="Execute each program R times; outcome changes mark it flaky.")
    ] = 1,
    max_infra_fraction: Annotated[
        float, typer.Option(help="Exit 3 when infra outcomes exceed this fraction.")
    ] = 0.05,
    store: Annotated[
        Path | None, typer.Option(help="Result store (DuckDB file); default $CODEGYM_STORE.")
    ] = None,
    no_store: Annotated[bool, typer.Option(help="Do everything afresh, store nothing.")] = False,
    export: Annotated[
        str | None,
        typer.Option(help="Also export the run to this path or fsspec URL (.parquet/.jsonl)."),
    ] = None,
    mlflow: Annotated[bool, typer.Option(help="Track the run in MLflow.")] = False,
    mlflow_uri: Annotated[
        str | None, typer.Option(help="MLflow tracking URI (default ./mlruns).")
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(help="More metrics in summary.json (repeat): latency, tokens, or a plug-in."),
    ] = None,
    metrics_port: MetricsPortOption = None,
    trace_file: TraceFileOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    trained_tasks_ok: Annotated[
        bool,
        typer.Option(
            help="Evaluate a codegym-trained model on tasks it was trained on (refused "
            "otherwise: such a number is not held out)."
        ),
    ] = False,
    mirror: MirrorOption = None,
) -> None:
    """Sample a model on a suite, score every sample in the sandbox, write a run folder.

    Generations and scores are stored by content, so re-running finishes only what is
    missing: a killed run resumes, a finished one returns at once.
    Exit codes: 0 done, 2 bad input, 3 too many infra failures (see the diagnosis), 4 the
    run is written but --mirror could not copy it.
    """
    from codegym._registry import UnknownName
    from codegym.policies.registry import make_policy

    if export and no_store:
        fail("--export reads the run back from the store: drop --no-store")
    check_mirror(mirror)
    if mode not in ("completions", "chat"):
        fail(f"--mode {mode!r}: use 'completions' or 'chat'")
    if n < 1 or not 1 <= model_concurrency <= 4096 or flaky_repeats < 1:
        fail("-n, --model-concurrency and --flaky-repeats must be positive")
    env_spec = _env_spec(env, env_options) if env is not None else None
    try:
        taskset = load_suite(suite, format=fmt, since=since)
        tasks = list(taskset)
        params = SamplingParams(
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, n=n, seed=seed
        )
        options = json_object(policy_options, "--policy-options")
        policy = make_policy(
            policy_name,
            model=model,
            base_url=base_url,
            mode=mode,
            concurrency=model_concurrency,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            tools=_env_tools(env) if mode == "chat" else None,
            **options,
        )
    except (DatasetError, PolicyError, UnknownName) as e:
        fail(str(e))
    if env is None and any(t.repo for t in tasks):
        fail(
            f"suite {suite!r} holds repository tasks, which an agent solves with tools in a "
            "workspace: add --env repo (and --mode chat for native tool calls)"
        )
    if limit is not None:
        tasks = tasks[:limit]
    _check_metrics(metric)
    start_telemetry(metrics_port, trace_file)
    if not tasks:
        fail(f"suite {suite!r} has no tasks")
    config: dict[str, Any] = {
        "command": "eval",
        "suite": suite,
        **({"since": since} if since else {}),
        "suite_digest": taskset.digest,
        "model": model,
        "base_url": base_url,
        "mode": mode,
        "params": params.__dict__ | {"stop": list(params.stop)},
        "tasks": len(tasks),
        "tier": tier,
        "flaky_repeats": flaky_repeats,
        "policy": policy_name,
    }
    if env_spec is not None:
        config["env"] = {"name": env_spec.name, "options": env_spec.options}
    if policy_name == "transformers":
        config["lineage"] = _lineage(options.get("model_dir", model), tasks, trained_tasks_ok)
    start = time.perf_counter()
    with open_store(store, no_store) as st:
        try:
            if env_spec is not None:
                from codegym.cli.eval_agent import evaluate_agents

                images = _images_for(tasks, suite)
                results = asyncio.run(
                    evaluate_agents(
                        tasks, env_spec, policy, params, tier, workers, images, out,
                        sandbox_url=sandbox_url, model_concurrency=model_concurrency,
                        ground_truth=ground_truth,
                        quiet=as_json, seed=seed or 0,
                    )
                )  # fmt: skip
            else:
                results = asyncio.run(
                    _evaluate(
                        tasks,
                        policy,
                        params,
                        mode == "chat",
                        tier,
                        workers,
                        sandbox_url,
                        st,
                        model_concurrency,
                        flaky_repeats,
                        ground_truth,
                        as_json,
                        suite,
                    )
                )
        except (HostUnsupported, EnvError, RolloutError) as e:
            fail(str(e))
        except RolloutAborted as e:
            fail(e.diagnosis, code=3)
        if st is not None:
            finish_in_store(st, "eval", config, results, export)
    summary = build_summary(
        results,
        seconds=time.perf_counter() - start,
        config=config,
        ks=sorted({1, 10, 100, n} & set(range(1, n + 1))),
        max_infra_fraction=max_infra_fraction,
        metrics=metric or (),
    )
    write_run(out, results, summary)
    with mlflow_run(mlflow, mlflow_uri, f"eval-{model}", config) as mf:
        if mf is not None:
            mf.log_metrics(
                {f"pass@{k}": v["estimate"] for k, v in summary["pass_at_k"].items()}
                | {"scored": summary["scored"], "excluded": summary["excluded"]}
            )
            mf.log_artifact(out / "summary.json")
            mf.log_artifact(out / "results.jsonl")
    _print_summary(summary, as_json)
    if not as_json:
        typer.echo(f"wrote {out / 'results.jsonl'} and {out / 'summary.json'}", err=True)
    mirror_run(out, mirror)  # a failed run's folder too: it holds the diagnosis
    if summary["status"] != "ok":
        fail(summary["diagnosis"], code=3)


def _lineage(model_dir: str, tasks: list[Task], trained_ok: bool) -> dict[str, Any] | None:
    """What a codegym-trained model came from (None for any other model); its tasks
    trained on are refused unless ``trained_ok``, and counted in the record then."""
    from codegym.tasks import TaskSet
    from codegym.train.split import HeldoutError, check_heldout, read_lineage

    try:
        lineage = read_lineage(model_dir)
        if lineage is None:
            return None
        trained = set(lineage["tasks"]["train_ids"])
        if not trained_ok:
            check_heldout(TaskSet.of("eval", tasks), lineage, model_dir)
    except HeldoutError as e:
        fail(f"{e} (or pass --trained-tasks-ok to score them anyway)")
    except (KeyError, TypeError):
        fail(f"{model_dir}: lineage.json is not a codegym lineage record; remove it or restore it")
    return {"model_dir": model_dir, **made_from(lineage),
            "tasks_trained_on": sum(t.id in trained for t in tasks)}  # fmt: skip


def _env_spec(env: str, options: str) -> EnvSpec:
    """The env of ``--env``, its options checked (a JSON object)."""
    if env not in ENVS:
        fail(f"--env {env!r}: not registered; known: {', '.join(sorted(ENVS))}")
    return EnvSpec(env, json_object(options, "--env-options"))


def _env_tools(env: str | None) -> list[dict[str, Any]] | None:
    """The env's tool definitions, sent with every chat request (native tool calls)."""
    return getattr(ENVS[env], "tools", None) if env is not None else None


def _images_for(tasks: list[Task], suite: str) -> Any:
    from codegym.cli.rollout_cmd import _images_for as images_for

    return images_for(tasks, suite)


async def _evaluate(
    tasks: list[Task],
    policy: Policy,
    params: SamplingParams,
    chat: bool,
    tier: str,
    workers: int | None,
    sandbox_url: list[str] | None,
    store: Store | None,
    model_concurrency: int,
    flaky_repeats: int,
    ground_truth: bool,
    quiet: bool,
    suite_name: str = "",
) -> list[SampleResult]:
    async with open_sandbox(tier, workers, sandbox_url, tasks) as (sb, inflight):
        broken: list[SampleResult] = []
        if ground_truth:
            tasks, reasons = await check_ground_truth(sb, tasks)
            for tid, why in reasons.items():
                broken += quarantined_results(tid, params.n, why)
        with score_progress(len(tasks) * params.n, "eval", quiet) as progress:
            runner = Runner(
                sb,
                cache=DictCache(store) if store else None,
                config=RunnerConfig(
                    sandbox_concurrency=inflight,
                    model_concurrency=model_concurrency,
                    flaky_repeats=flaky_repeats,
                    suite=suite_name,
                ),
                on_result=progress,
            )
            try:
                return broken + await runner.evaluate(tasks, policy, params, chat=chat)
            finally:
                close = getattr(policy, "aclose", None)
                if close is not None:  # HTTP clients hold a session
                    await close()


def _check_metrics(names: list[str] | None) -> None:
    """Refuse an unknown ``--metric`` before any work, naming the registered ones."""
    from codegym._registry import UnknownName
    from codegym.evals.metrics import METRICS

    for name in names or []:
        try:
            METRICS.get(name)
        except UnknownName as e:
            fail(f"--metric {name}: {e}")
