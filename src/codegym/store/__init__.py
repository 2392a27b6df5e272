"""Content-addressed results in an embedded DuckDB file (DESIGN.md principle 2).

A result is a function of its inputs: ``content_key(kind, **parts)`` hashes everything
that decides it, and the store keeps the first record for each key, so re-running a
finished eval costs one batched lookup and a killed run resumes with nothing lost or
duplicated. Runs list their items in order and export to Parquet/JSONL anywhere fsspec
writes (local paths, ``s3://``...).

    with Store() as store:                    # $CODEGYM_STORE or ~/.cache/codegym/store.duckdb
        key = content_key("score", task=task.digest(), harness=HARNESS_VERSION,
                          limits=limits.to_wire(), completion=completion)
        cached = store.get_scores([key])
        store.put_scores([ScoreRecord(key, passed=True, outcome="pass")])
"""

from codegym.store.cache import DictCache
from codegym.store.errors import (
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreInputError,
    StoreLocked,
)
from codegym.store.keys import canonical, content_key
from codegym.store.records import (
    GenerationRecord,
    RunInfo,
    RunItem,
    RunRow,
    RunStatus,
    ScoreRecord,
    TrajectoryRecord,
)
from codegym.store.store import Store, default_store_path

__all__ = [
    "DictCache",
    "GenerationRecord",
    "RunInfo",
    "RunItem",
    "RunRow",
    "RunStatus",
    "ScoreRecord",
    "Store",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreInputError",
    "StoreLocked",
    "TrajectoryRecord",
    "canonical",
    "content_key",
    "default_store_path",
]
