"""Which suites are repository-task files, decided without the task model.

``score``, ``eval`` and ``rollout`` ask this of every suite they are given; keeping it out
of ``task`` keeps pydantic (about 0.2 s to import) off the path of a suite that is not one.
"""

from __future__ import annotations

import json
from pathlib import Path

OFFLINE = "swe-offline"
"""The suite name of the shipped task set (312 tasks over 13 packages, see docs/swe.md)."""
OFFLINE_FILE = Path(__file__).with_name("data") / "swe-offline-v1.jsonl.gz"


def task_file(suite: str | Path) -> Path | None:
    """The repository task file a suite names: the shipped set by its name (``swe-offline``),
    else the path when it is a task file; None otherwise."""
    if str(suite) == OFFLINE:
        return OFFLINE_FILE
    p = Path(suite)
    return p if p.is_file() and is_task_file(p) else None


def is_task_file(path: str | Path) -> bool:
    """Whether the file's first object has a repository task's fields."""
    import gzip

    p = Path(path)
    try:
        with gzip.open(p, "rt") if p.name.endswith(".gz") else open(p) as f:
            first = next((line for line in f if line.strip()), "")
        keys = set(json.loads(first))
    except (OSError, EOFError, ValueError, TypeError):
        return False
    return {"instance_id", "FAIL_TO_PASS", "patch"} <= keys
