"""``codegym score --suite TASKS.jsonl PREDICTIONS.jsonl``: repository tasks (SWE-style)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import typer

from codegym.cli._common import console, fail, open_store


def score_repository_tasks(
    tasks_file: Path,
    predictions_file: Path,
    out: Path,
    workers: int | None,
    store_path: Path | None,
    no_store: bool,
    as_json: bool,
) -> None:
    """Grade SWE-bench-format predictions; write RESULTS with ``resolved`` and ``outcome``."""
    from codegym.sandbox import HostUnsupported, Sandbox, SandboxError
    from codegym.sandbox.images import ImageError, ImageStore
    from codegym.tasks import DatasetError
    from codegym.tasks.swe.score import (
        ensure_images,
        read_predictions,
        score_predictions,
        summary,
    )
    from codegym.tasks.swe.task import load_tasks

    try:
        tasks = {t.instance_id: t for t in load_tasks(tasks_file)}
        predictions = read_predictions(predictions_file, tasks)
        images = ImageStore()
        used = [tasks[p["instance_id"]] for p in predictions]
        say = lambda m: console.print(m, highlight=False, soft_wrap=True)  # noqa: E731
        ensure_images(used, images, tasks_file, say)
    except (DatasetError, ImageError) as e:
        fail(str(e))
    if not predictions:
        fail(f"no predictions in {predictions_file}")

    async def run() -> list[dict[str, object]]:
        n = workers or os.cpu_count() or 1
        with open_store(store_path, no_store) as store:
            async with Sandbox(workers=n, images=images) as sb:
                return await score_predictions(sb, tasks, predictions, store=store, concurrency=n)

    try:
        results = asyncio.run(run())
    except (HostUnsupported, SandboxError) as e:
        fail(str(e))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in results))
    tmp.replace(out)
    s = summary(results)
    if as_json:
        typer.echo(json.dumps(s))
    else:
        console.print(
            f"resolved {s['resolved']}/{s['scored']} ({s['resolved_rate']:.1%}, 95% CI "
            f"{s['ci_low']:.1%}–{s['ci_high']:.1%}); outcomes {s['outcomes']}; "
            f"excluded as infra: {s['excluded']['infra']}",
            highlight=False,
        )
