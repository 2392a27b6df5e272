"""Helpers shared by CLI commands: turning library errors into clear messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from codegym.store import Store

# Options the long-running commands share (eval, rollout, train).
MetricsPortOption = Annotated[
    int | None, typer.Option(help="Serve Prometheus metrics on 127.0.0.1:PORT.")
]
TraceFileOption = Annotated[
    Path | None, typer.Option(help="Write OpenTelemetry spans to this JSONL file.")
]

# Options of the commands that read a suite (score, eval).
FormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="A JSONL suite's record format (evalplus, livecodebench, humaneval, mbpp, apps, "
        "codecontests, or a plug-in); default: detected from its fields.",
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Keep only the tasks released on or after this day (YYYY-MM-DD; the records' "
        "dates, e.g. LiveCodeBench's contest_date): problems newer than a model's data."
    ),
]

MirrorOption = Annotated[
    str | None,
    typer.Option(
        help="Also copy the run folder to this fsspec URL (s3://bucket/runs, file:///…): "
        "to URL/<folder name>, once the run is written. Checked before the run starts.",
        show_default=False,
    ),
]

console = Console(stderr=True)


def check_mirror(url: str | None) -> None:
    """Fail now (exit 2) if ``--mirror URL`` cannot be written, not after the run."""
    if url is None:
        return
    from codegym.train.checkpoint import CheckpointError, check_remote

    try:
        check_remote(url, label="--mirror")
    except CheckpointError as e:
        fail(str(e))


def mirror_run(folder: Path, url: str | None) -> None:
    """Copy the run ``folder`` to ``url/<folder name>`` (exit 4 if that fails: the run
    itself is complete and kept locally)."""
    if url is None:
        return
    from codegym.train.checkpoint import CheckpointError, mirror_path

    try:
        where = mirror_path(folder, url, label="--mirror")
    except CheckpointError as e:
        fail(f"{e} The run is complete in {folder}.", code=4)
    console.print(f"run folder mirrored to {where}")


def fail(message: str, code: int = 2) -> NoReturn:
    # one line, whatever the width: a log cut at 80 columns split paths mid-name
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def json_object(text: str, option: str) -> dict[str, Any]:
    """The JSON object an option like ``--env-options`` was given; else a clear exit 2."""
    try:
        value = json.loads(text)
    except ValueError as e:
        fail(f"{option} {text!r}: give a JSON object ({e})")
    if not isinstance(value, dict):
        fail(f"{option} {text!r}: give a JSON object, not {type(value).__name__}")
    return value


def store_or_fail(path: Path | None) -> Store:
    """The result store at ``path`` (default ``$CODEGYM_STORE``), open; else a clear exit."""
    from codegym.store import Store, StoreError  # DuckDB: only for commands that store

    try:
        return Store(path)
    except StoreError as e:
        fail(str(e))


@contextmanager
def open_store(path: Path | None, disabled: bool) -> Iterator[Store | None]:
    """The result store for a command (None with ``--no-store``), closed on exit."""
    if disabled:
        yield None
        return
    store = store_or_fail(path)
    try:
        yield store
    finally:
        store.close()


def start_telemetry(metrics_port: int | None, trace_file: Path | None) -> None:
    """Expose metrics and write traces for a long-running command, when asked."""
    from codegym.telemetry import MetricsServerError, configure_tracing, serve_metrics

    if metrics_port is not None:
        try:
            serve_metrics(metrics_port)
        except MetricsServerError as e:
            fail(str(e))
    if trace_file is not None:
        configure_tracing("file", path=trace_file)


def finish_in_store(
    store: Store, kind: str, config: dict[str, Any], results: Sequence[Any], export: str | None
) -> None:
    """Record the finished run in the store and, when asked, export it."""
    from codegym.evals.rundir import export_run, record_run, run_id_for
    from codegym.store import StoreError

    run_id = run_id_for(config)
    try:
        record_run(store, run_id, kind, config, results)
        if export:
            n = export_run(store, run_id, export)
            console.print(f"exported {n} rows to {export}", highlight=False)
    except StoreError as e:
        fail(str(e))


def environment_store(tasks: Sequence[Any]) -> Any:
    """The image cache for tasks that run in an environment (``Task.image``), checked
    reachable; None when none does."""
    from codegym.sandbox.images import ImageError
    from codegym.tasks import environments

    try:
        store = environments.store_for(tasks)
        if store is not None:
            store.check_reachable()
    except ImageError as e:
        fail(str(e))
    return store


async def check_ground_truth(sb: Any, tasks: Sequence[Any]) -> tuple[list[Any], dict[str, str]]:
    """``--ground-truth``: every reference first (``codegym.tasks.verify``); the sound tasks,
    with CPU limits sized from their reference, and the broken ones' reasons by id (each
    printed). Tasks without references are kept unchecked, and said so."""
    from codegym.tasks import verify

    if not all(t.reference for t in tasks):
        console.print("[yellow]some tasks have no reference: ground truth not checked[/]")
        return list(tasks), {}
    report = await verify(sb, tasks)
    broken = {q.id: f"{q.kind}: {q.reason}" for q in report.quarantined}
    for q in report.quarantined:
        console.print(f"[yellow]quarantined[/] {q.id}: {q.kind}: {q.reason}", highlight=False)
    return list(report.kept), broken


@asynccontextmanager
async def open_sandbox(
    tier: str, workers: int | None, urls: Sequence[str] | None, tasks: Sequence[Any] = ()
) -> AsyncIterator[tuple[Any, int]]:
    """The sandbox a command scores with, and how many scorings to keep in flight: a local
    pool, or (``--sandbox-url``, repeatable) the sandbox service, one URL or a pool of them
    with failover (``codegym.service.RemoteSandbox``, token from ``CODEGYM_TOKEN``).

    Tasks that run in an environment (``Task.image``) get a local jail pool with the image
    cache, their images built (or found built) before the first sample."""
    import asyncio

    from codegym.sandbox import Sandbox, SandboxInputError
    from codegym.tasks import environments

    refs = environments.needed(tasks)
    if refs:
        if urls or tier != "jail":
            where = "the sandbox service" if urls else f"the {tier!r} tier"
            fail(
                f"these tasks run in the environment {', '.join(refs)} (a pinned image), "
                f"which {where} cannot run; score them on the local jail tier (--tier jail)"
            )
        store = environment_store(tasks)
        async with Sandbox(tier=tier, workers=workers, images=store) as sb:

            def say(message: str) -> None:
                console.print(f"environment {message}", highlight=False)

            try:
                await asyncio.to_thread(environments.of(sb).prepare, refs, say)
            except environments.EnvironmentUnavailable as e:
                fail(f"{e}; build it where its wheels can be fetched (scripts/setup.sh does)")
            yield sb, 2 * sb.size
        return
    if urls:
        from codegym.service.client import RemoteSandbox

        try:
            remote = RemoteSandbox(list(urls))
        except SandboxInputError as e:
            fail(str(e))
        async with remote:
            yield remote, 8 * len(urls)
    else:
        async with Sandbox(tier=tier, workers=workers) as sb:
            yield sb, 2 * sb.size


@contextmanager
def mlflow_run(
    enabled: bool, uri: str | None, run_name: str, params: dict[str, Any]
) -> Iterator[Any]:
    """An MLflow run for a command (``--mlflow``; ``--mlflow-uri`` or MLFLOW_TRACKING_URI,
    default ``./mlruns``), or None. An unreachable store fails here, before any work."""
    if not enabled:
        yield None
        return
    from codegym.telemetry.tracking import Tracker, TrackingError

    try:
        tracker = Tracker(run_name, tracking_uri=uri).start()
        tracker.log_params(_flat(params))
    except TrackingError as e:
        fail(str(e))
    with tracker:
        yield tracker


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def made_from(record: dict[str, Any], checkpoint: str | None = None) -> dict[str, Any]:
    """The fields that say where a model came from, flat: its checkpoint id (the record's
    ``checkpoint``, or ``checkpoint`` given for a checkpoint's own record, whose id is its
    ``id``), parent, config digest, step and the digest of the tasks it trained on. Every
    eval, rollout and demo folder and ``codegym runs`` quote these, so they say one thing."""
    tasks = record.get("tasks")
    return {
        "checkpoint": checkpoint if checkpoint is not None else record.get("checkpoint"),
        "parent": record.get("parent"),
        "config_digest": record.get("config_digest"),
        "step": record.get("step"),
        "train_digest": tasks.get("train_digest") if isinstance(tasks, dict) else None,
    }
