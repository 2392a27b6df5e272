"""The store's tables (DuckDB DDL) and the Arrow schemas used to batch-insert into them.

Timestamps are Unix seconds (DOUBLE); JSON documents are canonical JSON text in VARCHAR
columns (no extension needed to read them; cast to JSON in SQL to query inside).
Token ids and logprobs are packed little-endian int64 / float64 BLOBs: they round-trip
at C speed (a list column costs a Python object per token on every read), and exports
unpack them into Parquet list columns.
``SCHEMA_VERSION`` is written to ``codegym_meta`` and checked on open: a file written by a
newer codegym is refused rather than misread.
"""

from __future__ import annotations

import re
from typing import Final

Columns = tuple[tuple[str, str], ...]
"""(name, Arrow type) pairs; pyarrow is imported only when a batch is built."""

SCHEMA_VERSION: Final = 1
META_TABLE: Final = "codegym_meta"

DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {META_TABLE} (name VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS generations (
    key VARCHAR PRIMARY KEY, text VARCHAR NOT NULL, finish_reason VARCHAR,
    token_ids BLOB, logprobs BLOB, tokens_in BIGINT, tokens_out BIGINT,
    model_s DOUBLE, created DOUBLE NOT NULL);
CREATE TABLE IF NOT EXISTS scores (
    key VARCHAR PRIMARY KEY, passed BOOLEAN NOT NULL, outcome VARCHAR NOT NULL,
    detail VARCHAR NOT NULL, cpu_s DOUBLE NOT NULL, wall_s DOUBLE NOT NULL,
    flaky BOOLEAN NOT NULL, created DOUBLE NOT NULL, parts VARCHAR NOT NULL DEFAULT '');
-- added after schema 1 was released; a store made before it gains the column on open
ALTER TABLE scores ADD COLUMN IF NOT EXISTS parts VARCHAR DEFAULT '';
CREATE TABLE IF NOT EXISTS trajectories (
    key VARCHAR PRIMARY KEY, run_id VARCHAR, task_id VARCHAR, reward DOUBLE,
    outcome VARCHAR, data VARCHAR NOT NULL, created DOUBLE NOT NULL);
CREATE INDEX IF NOT EXISTS trajectories_run ON trajectories (run_id);
CREATE INDEX IF NOT EXISTS trajectories_task ON trajectories (task_id);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, config VARCHAR NOT NULL,
    status VARCHAR NOT NULL, created DOUBLE NOT NULL, finished DOUBLE);
CREATE TABLE IF NOT EXISTS run_items (
    run_id VARCHAR NOT NULL, ordinal BIGINT NOT NULL, task_id VARCHAR NOT NULL,
    sample_index BIGINT NOT NULL, cluster VARCHAR NOT NULL, generation_key VARCHAR,
    score_key VARCHAR, sample VARCHAR, PRIMARY KEY (run_id, ordinal));
"""

GENERATIONS: Final[Columns] = (
    ("key", "string"),
    ("text", "string"),
    ("finish_reason", "string"),
    ("token_ids", "binary"),
    ("logprobs", "binary"),
    ("tokens_in", "int64"),
    ("tokens_out", "int64"),
    ("model_s", "float64"),
    ("created", "float64"),
)
SCORES: Final[Columns] = (
    ("key", "string"),
    ("passed", "bool_"),
    ("outcome", "string"),
    ("detail", "string"),
    ("cpu_s", "float64"),
    ("wall_s", "float64"),
    ("flaky", "bool_"),
    ("created", "float64"),
    ("parts", "string"),
)
TRAJECTORIES: Final[Columns] = (
    ("key", "string"),
    ("run_id", "string"),
    ("task_id", "string"),
    ("reward", "float64"),
    ("outcome", "string"),
    ("data", "string"),
    ("created", "float64"),
)
RUN_ITEMS: Final[Columns] = (
    ("run_id", "string"),
    ("ordinal", "int64"),
    ("task_id", "string"),
    ("sample_index", "int64"),
    ("cluster", "string"),
    ("generation_key", "string"),
    ("score_key", "string"),
    ("sample", "string"),
)


def made_by_ddl() -> tuple[frozenset[str], frozenset[str]]:
    """The tables and the indexes ``DDL`` makes, by name."""
    tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", DDL)
    indexes = re.findall(r"CREATE INDEX IF NOT EXISTS (\w+)", DDL)
    return frozenset(tables), frozenset(indexes)
