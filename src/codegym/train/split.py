"""The trainer's tasks: a training pool and a held-out set that never share a task.

    split = split_tasks(config.tasks)       # split.train, split.heldout: TaskSets
    split.record()                          # what checkpoints and evaluations store

Without ``tasks.suite`` the tasks are a synthetic family, drawn with two seeds
(``train_seed``, ``heldout_seed``). With one (any spec ``load_suite`` takes: ``humaneval``,
``synth:…``, a dataset file) each task lands on one side by its id alone: held out when
sha256 of ``"codegym-split/<split_seed>/<id>"`` falls in the lowest ``heldout_fraction`` of
the range. The same id lands on the same side whatever the file's order, and a task added
to the file moves no other. ``train_tasks`` and ``heldout_tasks`` cap each side (dataset
order).

The record holds both sides' digests and the training ids, so an evaluation can refuse to
call a number "held out" when its tasks were trained on (``check_heldout``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegym.errors import CodegymError
from codegym.tasks.taskset import TaskSet
from codegym.train.config import TasksSection

__all__ = [
    "LINEAGE_FILE",
    "HeldoutError",
    "TaskSplit",
    "check_heldout",
    "is_heldout",
    "read_lineage",
    "split_tasks",
]

LINEAGE_FILE = "lineage.json"
"""Written beside a trained model: its config digest, step and tasks (``TaskSplit.record``)."""

_SCALE = 1 << 64


class HeldoutError(CodegymError, ValueError):
    """A split or a held-out number that cannot be trusted: a side is empty, the tasks
    overlap what the model was trained on, or the model's lineage is unreadable."""


def is_heldout(task_id: str, fraction: float, seed: int = 0) -> bool:
    """Whether ``task_id`` is on the held-out side of a split with these settings."""
    h = hashlib.sha256(f"codegym-split/{seed}/{task_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") < fraction * _SCALE


@dataclass(frozen=True)
class TaskSplit:
    """The two sides of a split, and where they came from."""

    source: str
    """The suite spec, or ``synth:<family>`` for the seeded synthetic pools."""
    train: TaskSet
    heldout: TaskSet

    def record(self) -> dict[str, Any]:
        """What a checkpoint and an evaluation store: digests, sizes, the training ids."""
        return {
            "source": self.source,
            "train_digest": self.train.digest,
            "heldout_digest": self.heldout.digest,
            "train_tasks": len(self.train),
            "heldout_tasks": len(self.heldout),
            "train_ids": sorted(t.id for t in self.train),
        }


def split_tasks(t: TasksSection) -> TaskSplit:
    """The training pool and held-out set ``t`` describes (see the module docstring).

    Raises:
        DatasetError: ``t.suite`` cannot be loaded.
        HeldoutError: a side came out empty, or (synthetic pools) the seeds drew a task
            twice.
    """
    if t.suite is None:
        from codegym.tasks.synthetic import generate

        name = f"synth:{t.family}"
        train = TaskSet.of(name, generate(t.family, t.train_tasks, t.train_seed, t.difficulty))
        heldout = TaskSet.of(
            name, generate(t.family, t.heldout_tasks, t.heldout_seed, t.difficulty)
        )
        shared = {x.id for x in train} & {x.id for x in heldout}
        if shared:
            raise HeldoutError(
                f"tasks: train_seed {t.train_seed} and heldout_seed {t.heldout_seed} draw "
                f"{len(shared)} of the same tasks (e.g. {sorted(shared)[0]}); pick other seeds"
            )
        return TaskSplit(name, train, heldout)
    from codegym.tasks import load_suite

    every = load_suite(t.suite)
    out = [x for x in every if not is_heldout(x.id, t.heldout_fraction, t.split_seed)]
    held = [x for x in every if is_heldout(x.id, t.heldout_fraction, t.split_seed)]
    split = TaskSplit(
        t.suite,
        TaskSet.of(f"{t.suite}#train", out[: t.train_tasks], source=every.source),
        TaskSet.of(f"{t.suite}#heldout", held[: t.heldout_tasks], source=every.source),
    )
    if not split.train.tasks or (t.heldout_tasks and not split.heldout.tasks):
        raise HeldoutError(
            f"tasks.suite {t.suite}: {len(every)} tasks split {len(out)} to train and "
            f"{len(held)} held out (heldout_fraction {t.heldout_fraction}); a side is "
            "empty: use a larger suite or another heldout_fraction"
        )
    return split


def read_lineage(model_dir: str | Path) -> dict[str, Any] | None:
    """The lineage record beside a model codegym trained, or None for any other model."""
    path = Path(model_dir) / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise HeldoutError(
            f"{path}: unreadable ({e}); without it a held-out number cannot be checked. "
            "Restore it, or delete it if the model was not trained on these tasks"
        ) from None
    return record


def check_heldout(heldout: TaskSet, lineage: dict[str, Any] | None, where: str) -> None:
    """Refuse to report ``heldout`` as held out for a model whose ``lineage`` says it was
    trained on any of its tasks. ``lineage`` None (a model codegym did not train) passes.

    Raises:
        HeldoutError: names how many tasks overlap and one of them.
    """
    if not lineage:
        return
    trained = set(lineage.get("tasks", {}).get("train_ids", ()))
    shared = sorted(trained & {t.id for t in heldout})
    if shared:
        raise HeldoutError(
            f"{where}: {len(shared)} of the {len(heldout)} held-out tasks were trained on "
            f"(e.g. {shared[0]}); a number on them is not held out. Evaluate on the split "
            "the model was trained with (the same tasks section), or on other tasks"
        )
