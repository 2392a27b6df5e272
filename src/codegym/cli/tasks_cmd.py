"""``codegym tasks``: make repository tasks offline from real packages."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from codegym.cli._common import console, fail

app = typer.Typer(help="Make SWE-style repository tasks from real packages.", no_args_is_help=True)


@app.command("synth")
def synth(
    specs: Annotated[
        list[Path], typer.Argument(help="Image specs of packages that ship their tests.")
    ],
    out: Annotated[Path, typer.Option(help="Where to write the tasks (JSONL).")],
    per_package: Annotated[int, typer.Option(help="Most mutants judged per package.")] = 100,
    workers: Annotated[int | None, typer.Option(help="Suites run at once (default: CPUs).")] = None,
    seed: Annotated[int, typer.Option(help="Which mutants are sampled.")] = 0,
    max_share: Annotated[
        float, typer.Option(help="Largest share of the suite a bug may fail.")
    ] = 0.25,
    clean_runs: Annotated[int, typer.Option(help="Clean suite runs that find stable tests.")] = 3,
    combined: Annotated[float, typer.Option(help="Share of mutants with 2-3 bugs combined.")] = 0.2,
    timeout_s: Annotated[float, typer.Option(help="Suite time limit (CPU seconds).")] = 60.0,
    gold_runs: Annotated[
        int,
        typer.Option(
            help="Gradings of a sampled gold patch that must all resolve (0: none; every "
            "gold patch is still checked to give the clean files back byte for byte)."
        ),
    ] = 3,
    gold_sample: Annotated[
        int,
        typer.Option(
            help="Kept tasks a package, at least, whose gold patch is graded as a prediction "
            "would be (one per module the grader's canaries go in, in any case; if one fails, "
            "all are)."
        ),
    ] = 2,
    every_gold: Annotated[
        bool, typer.Option("--every-gold", help="Grade every kept task's gold patch.")
    ] = False,
    aimed: Annotated[
        bool, typer.Option(help="Aim mutants at code the tests run (one traced clean run).")
    ] = True,
    at_once: Annotated[int, typer.Option(help="Packages worked on at once.")] = 2,
    cache: Annotated[Path | None, typer.Option(help="Image cache folder.")] = None,
) -> None:
    """Mutate real functions, keep the bugs the package's own tests catch: FAIL_TO_PASS
    and PASS_TO_PASS from JUnit results of fresh workspaces; the gold patch is the reverse."""
    import os

    from codegym.sandbox.images import ImageError, ImageStore
    from codegym.tasks.swe.synth import synth as run
    from codegym.tasks.swe.task import dump_tasks

    if not 0 < max_share <= 1:
        fail(f"--max-share {max_share}: use a share in (0, 1]")
    if per_package < 1 or clean_runs < 1:
        fail("--per-package and --clean-runs must be at least 1")
    if not 0 <= combined < 1:
        fail(f"--combined {combined}: use a share in [0, 1)")
    if gold_runs < 0 or gold_sample < 0:
        fail("--gold-runs and --gold-sample must be at least 0")
    if every_gold and not gold_runs:
        fail("--every-gold with --gold-runs 0 grades nothing: give --gold-runs 1 or more")
    if at_once < 1:
        fail(f"--at-once {at_once}: work on at least 1 package at a time")
    t0 = time.monotonic()
    try:
        store = ImageStore(cache)
        tasks, report = asyncio.run(
            run(
                specs,
                store,
                per_package=per_package,
                workers=workers or os.cpu_count() or 1,
                seed=seed,
                log=lambda m: console.print(
                    f"[{time.monotonic() - t0:7.1f} s] {m}", highlight=False, soft_wrap=True
                ),
                runs=clean_runs,
                max_share=max_share,
                timeout_s=timeout_s,
                combined_share=combined,
                gold_runs=gold_runs,
                gold_sample=None if every_gold else gold_sample,
                aimed=aimed,
                at_once=at_once,
                on_package=lambda so_far: dump_tasks(so_far, out),
            )
        )
    except (ImageError, RuntimeError) as e:
        fail(str(e))
    dump_tasks(tasks, out)
    tried = sum(report.tried.values())
    summary = {
        "tasks": len(tasks),
        "tried": tried,
        "kept_share": round(len(tasks) / tried, 3) if tried else 0.0,
        "packages": dict(report.kept),
        "rejected": dict(report.rejected),
        "unreached": sum(report.unreached.values()),
        "failed_packages": report.failed,
        "families": dict(Counter(t.created_by["family"] for t in tasks)),
        "seconds": round(report.seconds, 1),
    }
    typer.echo(json.dumps(summary))
    if report.failed:
        raise typer.Exit(1)


@app.command("prepare")
def prepare(
    suite: Annotated[
        str, typer.Argument(help="A repository task file (JSONL, or .gz), or swe-offline.")
    ],
    cache: Annotated[Path | None, typer.Option(help="Image cache folder.")] = None,
    workers: Annotated[int, typer.Option(help="Sandbox workers.")] = 2,
    images_only: Annotated[
        bool, typer.Option(help="Only build the images (states are made on first use).")
    ] = False,
) -> None:
    """Build every image the tasks start from (fetching their sdists and packages now,
    checked by sha256) and make each task's starting state, so that scoring and rollouts
    never fetch or build anything."""
    from codegym.sandbox import HostUnsupported, Sandbox, SandboxError
    from codegym.sandbox.images import ImageError, ImageStore
    from codegym.tasks import DatasetError
    from codegym.tasks.swe.files import task_file
    from codegym.tasks.swe.grade import task_state
    from codegym.tasks.swe.score import ensure_images
    from codegym.tasks.swe.task import load_tasks

    tasks_file = task_file(suite)
    if tasks_file is None:
        fail(f"{suite}: not a repository task file (nor swe-offline); make one with tasks synth")
    try:
        tasks = load_tasks(tasks_file)
        store = ImageStore(cache)
        ensure_images(tasks, store, tasks_file, lambda m: console.print(m, highlight=False))
    except (DatasetError, ImageError) as e:
        fail(str(e))
    if images_only:
        typer.echo(json.dumps({"tasks": len(tasks), "images": len({t.image for t in tasks})}))
        return

    async def states() -> int:
        async with Sandbox(workers=workers, images=store) as sb:
            for t in tasks:
                await task_state(sb, t)
        return len(tasks)

    try:
        n = asyncio.run(states())
    except (HostUnsupported, SandboxError) as e:
        fail(str(e))
    typer.echo(json.dumps({"tasks": n, "images": len({t.image for t in tasks})}))
