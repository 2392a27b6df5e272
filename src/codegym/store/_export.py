"""Write a run's rows as Parquet or JSONL to a local path or any fsspec URL.

The file is written through ``fsspec`` so ``s3://``, ``gs://``, ``memory://`` and local
paths behave the same; local parent directories are created. Parquet gets an explicit
schema (so an empty run still has typed columns) and the run's id, kind and config in the
file's key-value metadata under ``codegym.run``.
"""

from __future__ import annotations

import json
from typing import Literal

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from codegym.store.errors import StoreError
from codegym.store.records import RunInfo, RunRow

PARQUET_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("ordinal", pa.int64()),
        ("task_id", pa.string()),
        ("sample_index", pa.int64()),
        ("cluster", pa.string()),
        ("completion", pa.string()),
        ("passed", pa.bool_()),
        ("outcome", pa.string()),
        ("detail", pa.string()),
        ("cpu_s", pa.float64()),
        ("wall_s", pa.float64()),
        ("finish_reason", pa.string()),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
        ("model_s", pa.float64()),
        ("token_ids", pa.list_(pa.int64())),
        ("logprobs", pa.list_(pa.float64())),
        ("generation_key", pa.string()),
        ("score_key", pa.string()),
        ("sample", pa.string()),
    ]
)


def to_table(rows: list[RunRow], info: RunInfo) -> pa.Table:
    """The run's rows as an Arrow table with ``PARQUET_SCHEMA``."""
    records = []
    for row in rows:
        res = row.to_result()
        gen, item = row.generation, row.item
        records.append(
            {
                **{n: res.get(n) for n in PARQUET_SCHEMA.names},
                "run_id": info.run_id,
                "token_ids": list(gen.token_ids) if gen and gen.token_ids is not None else None,
                "logprobs": list(gen.logprobs) if gen and gen.logprobs is not None else None,
                "sample": None if item.sample is None else json.dumps(dict(item.sample)),
            }
        )
    meta = {
        "codegym.run": json.dumps(
            {"run_id": info.run_id, "kind": info.kind, "config": info.config, "status": info.status}
        )
    }
    return pa.Table.from_pylist(records, schema=PARQUET_SCHEMA.with_metadata(meta))


def write(rows: list[RunRow], info: RunInfo, url: str, format: Literal["parquet", "jsonl"]) -> None:
    """Write ``rows`` to ``url``.

    Raises:
        StoreError: the URL's filesystem is unknown or the file cannot be written.
    """
    try:
        fs, path = fsspec.core.url_to_fs(url)
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        if parent:
            fs.makedirs(parent, exist_ok=True)
        with fs.open(path, "wb") as f:
            if format == "parquet":
                pq.write_table(to_table(rows, info), f)
            else:
                for row in rows:
                    line = json.dumps(row.to_result(), ensure_ascii=False) + "\n"
                    f.write(line.encode("utf-8", "surrogatepass"))
    except (OSError, ValueError, ImportError) as e:
        raise StoreError(f"cannot export run {info.run_id!r} to {url!r}: {e}") from e
