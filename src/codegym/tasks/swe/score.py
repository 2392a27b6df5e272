"""Score SWE-bench-format predictions against repository tasks: resolved or not, and why.

Predictions are JSON lines with ``instance_id``, ``model_patch`` and
``model_name_or_path``; each result keeps the prediction's fields and adds ``resolved``
and ``outcome`` (and ``detail``). Grades are stored by content (the task, the patch, the
grader's version) in the result store, so a scoring run that is killed resumes where it
stopped and a re-run is free. Infra outcomes are retried once, then reported as ``infra``
and left out of the resolved rate, never counted as unresolved.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codegym.sandbox import Sandbox
from codegym.store import Store
from codegym.store.keys import content_key
from codegym.store.records import ScoreRecord
from codegym.tasks.swe.grade import Graded, grade
from codegym.tasks.swe.task import SweTask
from codegym.tasks.taskset import DatasetError

GRADER_VERSION = "swe-2"  # bump when a grading rule changes: stored grades go stale


def read_predictions(path: Path, tasks: dict[str, SweTask]) -> list[dict[str, Any]]:
    """The prediction lines, checked.

    Raises:
        DatasetError: a line that is not a prediction, or names an unknown instance.
    """
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise DatasetError(f"cannot read predictions {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise DatasetError(f"{path}:{n}: not JSON: {e}") from None
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise DatasetError(f"{path}:{n}: needs 'instance_id' (and 'model_patch')")
        if not isinstance(row.get("model_patch", ""), str | None):
            raise DatasetError(f"{path}:{n}: 'model_patch' must be a string (a diff)")
        if row["instance_id"] not in tasks:
            raise DatasetError(f"{path}:{n}: unknown instance_id {row['instance_id']!r}")
        out.append(row)
    return out


def grade_key(task: SweTask, patch: str) -> str:
    return content_key("swe-grade", task=task.model_dump(), patch=patch, grader=GRADER_VERSION)


async def score_predictions(
    sb: Sandbox,
    tasks: dict[str, SweTask],
    predictions: list[dict[str, Any]],
    *,
    store: Store | None = None,
    concurrency: int = 2,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Grade every prediction (stored grades are reused); results in prediction order."""
    keys = [grade_key(tasks[p["instance_id"]], p.get("model_patch") or "") for p in predictions]
    known = store.get_scores(keys) if store is not None else {}
    gate = asyncio.Semaphore(concurrency)

    async def one(pred: dict[str, Any], key: str) -> dict[str, Any]:
        if key in known:
            s = known[key]
            graded = Graded(s.outcome, s.detail)
        else:
            task = tasks[pred["instance_id"]]
            async with gate:
                graded = await _grade_once_more(sb, task, pred.get("model_patch") or "")
            if store is not None and graded.outcome != "infra":
                store.put_scores(
                    [ScoreRecord(key, graded.resolved, graded.outcome, graded.detail[:2000])]
                )
        row = {**pred, "resolved": graded.resolved, "outcome": graded.outcome}
        if graded.detail:
            row["detail"] = graded.detail[:2000]
        if on_result is not None:
            on_result(row)
        return row

    return list(await asyncio.gather(*(one(p, k) for p, k in zip(predictions, keys, strict=True))))


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by outcome and the resolved rate over scored (non-infra) predictions."""
    from statsmodels.stats.proportion import proportion_confint

    counts = Counter(r["outcome"] for r in results)
    scored = sum(n for o, n in counts.items() if o != "infra")
    resolved = counts.get("resolved", 0)
    low, high = proportion_confint(resolved, scored, method="wilson") if scored else (0.0, 0.0)
    return {
        "predictions": len(results),
        "scored": scored,
        "excluded": {"infra": counts.get("infra", 0)},
        "resolved": resolved,
        "resolved_rate": resolved / scored if scored else 0.0,
        "ci_low": float(low),
        "ci_high": float(high),
        "outcomes": dict(counts),
    }


def ensure_images(tasks: list[SweTask], store: Any, dataset: Path, log: Any = None) -> None:
    """Build every image the tasks start from that the cache lacks, from the spec each
    task names (next to the dataset file, else in ``examples/images``).

    Raises:
        DatasetError: no spec for a missing image, or a rebuild with another digest.
    """
    from codegym.sandbox.images import ImageNotFound, build_image

    here = Path(__file__).resolve().parents[4] / "examples" / "images"
    for digest in sorted({t.image for t in tasks}):
        try:
            store.layer_paths(store.get(digest))
            continue
        except ImageNotFound:
            pass
        task = next(t for t in tasks if t.image == digest)
        spec = next(
            (
                d / task.image_spec
                for d in (dataset.parent, here)
                if task.image_spec and (d / task.image_spec).is_file()
            ),
            None,
        )
        if spec is None:
            raise DatasetError(
                f"{task.instance_id}: image {digest} is not in {store.root} and no spec "
                f"{task.image_spec!r} was found next to {dataset} or in {here}"
            )
        built = build_image(spec, store, log)
        if built.digest != digest:
            raise DatasetError(
                f"{spec} builds {built.digest}, but the tasks were made on {digest}: "
                "the host's Python or the spec differs from the one the tasks were made with"
            )


async def _grade_once_more(sb: Any, task: SweTask, patch: str) -> Graded:
    """``grade``, once more on a fresh copy when the first was ours (``infra``). A bug of
    ours on some odd patch is infra too, named, never a crash that ends the whole run."""
    graded = Graded("infra")
    for _ in range(2):
        try:
            graded = await grade(sb, task, patch)
        except Exception as e:  # noqa: BLE001 - one prediction must not sink the others
            graded = Graded("infra", f"grader error: {type(e).__name__}: {e}"[:2000])
        if graded.outcome != "infra":
            break
    return graded
