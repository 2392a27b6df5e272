"""``Store``: content-addressed results in one embedded DuckDB file.

Where the file lives: the ``path`` argument (``":memory:"`` for a throwaway store), else
``$CODEGYM_STORE`` when set, else ``$XDG_CACHE_HOME/codegym/store.duckdb``, else
``~/.cache/codegym/store.duckdb``. The parent directory is created on first use.

Contract:

- Content-addressed tables (``generations``, ``scores``, ``trajectories``) are
  write-once: ``put_*`` inserts with ``ON CONFLICT DO NOTHING``, so the first record for a
  key wins and re-running the same writes adds nothing. ``put_*`` returns how many
  records were new.
- Every public call is one transaction (``transaction()`` groups several), so a
  ``kill -9`` loses at most the batch being written and the file opens fine afterwards
  (DuckDB's write-ahead log replays committed batches on open).
- One process may open a file read-write at a time (DuckDB's rule); a second one gets
  ``StoreLocked`` naming the file and the fix. ``read_only=True`` stores may share a file
  with other readers.
- Within a process the store is thread-safe (one re-entrant lock around the connection).
  Calls are batched and short (a 3,280-key lookup takes milliseconds to tens of ms), so
  asyncio code may call them directly or via ``asyncio.to_thread``; do not ``await``
  inside ``transaction()``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # imported when a store is opened (~0.15 s): not by every command
    import duckdb

from codegym.store import _convert as C
from codegym.store import _schema
from codegym.store.errors import (
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreInputError,
    StoreLocked,
)
from codegym.store.keys import canonical, canonical_json
from codegym.store.records import (
    RUN_STATUSES,
    GenerationRecord,
    RunInfo,
    RunItem,
    RunRow,
    RunStatus,
    ScoreRecord,
    TrajectoryRecord,
    check_key,
)

if TYPE_CHECKING:
    import pyarrow as pa

MEMORY = ":memory:"


def default_store_path() -> Path:
    """``$CODEGYM_STORE``, else ``$XDG_CACHE_HOME/codegym/store.duckdb``, else ``~/.cache/...``."""
    env = os.environ.get("CODEGYM_STORE")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "codegym" / "store.duckdb"


class Store:
    """The result store; see the module docstring for the contract.

    Raises (on open):
        StoreLocked: another process holds the file read-write.
        StoreCorrupt: the file is not a DuckDB database, is another application's DuckDB
            database, or was written by a newer codegym.
        StoreError: ``read_only=True`` and the file does not exist.
    """

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        chosen = MEMORY if str(path) == MEMORY else (path or default_store_path())
        self.path: Path = Path(chosen)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._depth = 0
        self._con: duckdb.DuckDBPyConnection | None = self._connect()
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -----------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        import duckdb

        if str(self.path) == MEMORY:
            return duckdb.connect(MEMORY)
        path = self.path
        if path.is_dir():
            raise StoreCorrupt(path, "it is a directory")
        if self.read_only and not path.exists():
            raise StoreError(
                f"the result store {str(path)!r} does not exist; check --store / "
                "CODEGYM_STORE, or run an eval first to create it"
            )
        if not self.read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        # DuckDB 2 refuses new work while a result is unfetched: every execute() here is
        # fetched to the end (fetchall), never fetchone().
        try:
            return duckdb.connect(str(path), read_only=self.read_only)
        except duckdb.Error as e:
            msg = str(e)
            held = re.search(r"Conflicting lock is held in (.*?)(?:\. See also|$)", msg)
            if held or "could not set lock" in msg.lower():
                raise StoreLocked(path, held.group(1) if held else msg) from e
            if "not a valid DuckDB database file" in msg:
                raise StoreCorrupt(path, "it is not a DuckDB database file") from e
            raise StoreCorrupt(path, msg) from e

    def _init_schema(self) -> None:
        con = self._conn()
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if tables and _schema.META_TABLE not in tables:
            raise StoreCorrupt(
                self.path, "it is a DuckDB database of another application (no codegym tables)"
            )
        version = -1
        if _schema.META_TABLE in tables:
            row = con.execute(
                f"SELECT value FROM {_schema.META_TABLE} WHERE name = 'schema_version'"
            ).fetchall()
            version = int(row[0][0]) if row else 0
            if version > _schema.SCHEMA_VERSION:
                raise StoreCorrupt(
                    self.path,
                    f"it was written by a newer codegym (store schema {version}; this one "
                    f"reads up to {_schema.SCHEMA_VERSION}); upgrade codegym",
                )
        elif self.read_only:
            raise StoreCorrupt(self.path, "it is an empty DuckDB database, not a codegym store")
        if self.read_only:
            return
        if version == _schema.SCHEMA_VERSION:  # made as this codegym makes it: nothing to do
            indexes = con.execute("SELECT index_name FROM duckdb_indexes()").fetchall()
            want_tables, want_indexes = _schema.made_by_ddl()
            if want_tables <= tables and want_indexes <= {r[0] for r in indexes}:
                return  # (the DDL's transaction is 30-60 ms of every command's start)
        with self.transaction():
            con.execute(_schema.DDL)
            con.execute(
                f"INSERT INTO {_schema.META_TABLE} VALUES ('schema_version', ?) "
                "ON CONFLICT DO NOTHING",
                [str(_schema.SCHEMA_VERSION)],
            ).fetchall()

    def close(self) -> None:
        """Close the file (idempotent). Later calls raise ``StoreClosed``."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _conn(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreClosed(f"the result store {str(self.path)!r} was used after close()")
        return self._con

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several calls into one atomic commit (nested uses join the outer one)."""
        with self._lock:
            con = self._conn()
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            con.begin()
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                con.rollback()
                raise
            self._depth = 0
            con.commit()

    # -- batched helpers -----------------------------------------------------------

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(
                f"{what}: the result store {str(self.path)!r} was opened read-only; "
                "open it with read_only=False to write"
            )

    def _insert(self, table: str, batch: pa.Table, conflict: str = "DO NOTHING") -> int:
        cols = ", ".join(batch.column_names)
        sql = f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _batch ON CONFLICT {conflict}"
        with self.transaction():
            con = self._conn()
            con.register("_batch", batch)
            try:
                row = con.execute(sql).fetchall()
            finally:
                con.unregister("_batch")
        return int(row[0][0]) if row else 0

    def _select(self, sql: str, params: list[Any] | None = None) -> dict[str, list[Any]]:
        # fetchall, not Arrow: building or scanning Arrow data makes pyarrow import pandas
        # (about a second), and reads must stay fast for a resumed run.
        with self._lock:
            cur = self._conn().execute(sql, params or [])
            rows = cur.fetchall()
            names = [d[0] for d in cur.description or []]
        return {n: [r[i] for r in rows] for i, n in enumerate(names)}

    def _select_keys(self, table: str, keys: Iterable[str]) -> dict[str, list[Any]]:
        wanted = list(dict.fromkeys(check_key(k, f"get from {table}") for k in C.iterable(keys)))
        if not wanted:
            return {}
        # One semi-join against the whole key list: one pass over the key index per
        # batch, far faster than one query per key.
        return self._select(
            f"SELECT t.* FROM {table} t SEMI JOIN (SELECT unnest($1::VARCHAR[]) AS key) q "
            "USING (key)",
            [wanted],
        )

    # -- content-addressed records ------------------------------------------------

    def put_generations(self, items: Iterable[GenerationRecord]) -> int:
        """Store model outputs; returns how many keys were new.

        Raises:
            StoreInputError: an item is not a ``GenerationRecord``.
        """
        self._writable("put_generations")
        rows = C.unique(items, GenerationRecord, "put_generations")
        return self._insert("generations", C.table(rows, _schema.GENERATIONS, C.gen_row))

    def get_generations(self, keys: Iterable[str]) -> dict[str, GenerationRecord]:
        """The stored generations among ``keys`` (missing keys are absent)."""
        cols = self._select_keys("generations", keys)
        return {r["key"]: C.generation(r) for r in C.rows(cols)}

    def put_scores(self, items: Iterable[ScoreRecord]) -> int:
        """Store verdicts; returns how many keys were new.

        Raises:
            StoreInputError: an item is not a ``ScoreRecord``.
        """
        self._writable("put_scores")
        rows = C.unique(items, ScoreRecord, "put_scores")
        return self._insert("scores", C.table(rows, _schema.SCORES, C.score_row))

    def get_scores(self, keys: Iterable[str]) -> dict[str, ScoreRecord]:
        """The stored scores among ``keys`` (missing keys are absent)."""
        cols = self._select_keys("scores", keys)
        return {r["key"]: _score(r) for r in C.rows(cols)}

    def put_trajectories(self, items: Iterable[TrajectoryRecord]) -> int:
        """Store episodes; returns how many keys were new.

        Raises:
            StoreInputError: an item is not a ``TrajectoryRecord`` or its data is not JSON.
        """
        self._writable("put_trajectories")
        rows = C.unique(items, TrajectoryRecord, "put_trajectories")
        return self._insert("trajectories", C.table(rows, _schema.TRAJECTORIES, C.traj_row))

    def get_trajectories(self, keys: Iterable[str]) -> dict[str, TrajectoryRecord]:
        """The stored trajectories among ``keys`` (missing keys are absent)."""
        return {t.key: t for t in C.trajectories(self._select_keys("trajectories", keys))}

    def find_trajectories(
        self, *, run_id: str | None = None, task_id: str | None = None
    ) -> list[TrajectoryRecord]:
        """Trajectories of a run and/or a task, oldest first."""
        where = " AND ".join(
            f"{col} = ?" for col, v in (("run_id", run_id), ("task_id", task_id)) if v is not None
        )
        params = [v for v in (run_id, task_id) if v is not None]
        sql = "SELECT * FROM trajectories" + (f" WHERE {where}" if where else "")
        return C.trajectories(self._select(sql + " ORDER BY created, key", params))

    # -- runs ------------------------------------------------------------------------

    def begin_run(self, run_id: str, kind: str, config: Mapping[str, Any]) -> RunInfo:
        """Start a run, or resume one with the same id, kind and config.

        ``config`` is stored in canonical JSON (see ``codegym.store.keys``).

        Raises:
            StoreInputError: the id exists with another kind or config (use a new id), or
                the config cannot be canonicalized.
        """
        self._writable("begin_run")
        for name, v in (("run_id", run_id), ("kind", kind)):
            if not isinstance(v, str) or not v:
                raise StoreInputError(f"begin_run: {name} must be a non-empty str, got {v!r}")
        if not isinstance(config, Mapping):
            raise StoreInputError(f"begin_run: config must be a mapping, got {config!r:.80}")
        text = canonical_json(canonical(config, "config"))
        with self.transaction():
            old = self.get_run(run_id)
            if old is None:
                self._conn().execute(
                    "INSERT INTO runs VALUES (?, ?, ?, 'running', ?, NULL)",
                    [run_id, kind, text, time.time()],
                ).fetchall()
            elif old.kind != kind or canonical_json(canonical(old.config)) != text:
                raise StoreInputError(
                    f"run {run_id!r} already exists with a different kind or config "
                    f"(stored kind {old.kind!r}); resume it with the same config, or "
                    "choose a new run id"
                )
            else:
                self._conn().execute(
                    "UPDATE runs SET status = 'running', finished = NULL WHERE run_id = ?",
                    [run_id],
                ).fetchall()
            info = self.get_run(run_id)
        assert info is not None  # inserted or found in this transaction
        return info

    def finish_run(self, run_id: str, status: RunStatus = "finished") -> None:
        """Mark a run ``finished``, ``failed`` or ``interrupted``.

        Raises:
            StoreInputError: unknown run id or status.
        """
        self._writable("finish_run")
        if status not in RUN_STATUSES - {"running"}:
            raise StoreInputError(
                f"finish_run: status {status!r} is not one of finished, failed, interrupted"
            )
        with self.transaction():
            self._require_run(run_id, "finish_run")
            self._conn().execute(
                "UPDATE runs SET status = ?, finished = ? WHERE run_id = ?",
                [status, time.time(), run_id],
            ).fetchall()

    def get_run(self, run_id: str) -> RunInfo | None:
        """The run with this id, or None."""
        runs = self._runs("WHERE run_id = ?", [run_id])
        return runs[0] if runs else None

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        return self._runs("ORDER BY created, run_id", [])

    def _runs(self, tail: str, params: list[Any]) -> list[RunInfo]:
        cols = self._select(f"SELECT * FROM runs {tail}", params)
        return [RunInfo(**{**r, "config": json.loads(r["config"])}) for r in C.rows(cols)]

    def _require_run(self, run_id: str, what: str) -> None:
        if self.get_run(run_id) is None:
            raise StoreInputError(
                f"{what}: no run {run_id!r} in {str(self.path)!r}; call begin_run first"
            )

    def add_run_items(self, run_id: str, items: Iterable[RunItem]) -> None:
        """Add or complete a run's items (idempotent).

        An item already at that ordinal keeps its task and sample index; keys and the
        sample given now fill in or replace its stored ones (so a runner may add items up
        front and attach ``score_key`` when scored).

        Raises:
            StoreInputError: unknown run, an item that is not a ``RunItem``, or an ordinal
                already holding a different task or sample index.
        """
        self._writable("add_run_items")
        latest: dict[int, RunItem] = {}
        for it in C.iterable(items):
            if not isinstance(it, RunItem):
                raise StoreInputError(f"add_run_items takes RunItem records, got {it!r:.80}")
            latest[it.ordinal] = it
        if not latest:
            return
        batch = C.table(list(latest.values()), _schema.RUN_ITEMS, lambda it: C.item_row(run_id, it))
        with self.transaction():
            self._require_run(run_id, "add_run_items")
            con = self._conn()
            con.register("_batch", batch)
            try:
                clash = con.execute(
                    "SELECT b.ordinal, i.task_id, i.sample_index, b.task_id, b.sample_index "
                    "FROM _batch b JOIN run_items i USING (run_id, ordinal) "
                    "WHERE i.task_id <> b.task_id OR i.sample_index <> b.sample_index LIMIT 1"
                ).fetchall()
            finally:
                con.unregister("_batch")
            if clash:
                o, t0, s0, t1, s1 = clash[0]
                raise StoreInputError(
                    f"run {run_id!r} item {o} is ({t0!r}, sample {s0}) but was given as "
                    f"({t1!r}, sample {s1}); a run's items are fixed, use a new run id"
                )
            self._insert(
                "run_items",
                batch,
                "DO UPDATE SET generation_key = COALESCE(EXCLUDED.generation_key, "
                "run_items.generation_key), score_key = COALESCE(EXCLUDED.score_key, "
                "run_items.score_key), sample = COALESCE(EXCLUDED.sample, run_items.sample)",
            )

    def run_items(self, run_id: str) -> list[RunRow]:
        """A run's items in order, joined with their generations and scores.

        Raises:
            StoreInputError: unknown run id.
        """
        self._require_run(run_id, "run_items")
        g = ", ".join(f"g.{c} AS g_{c}" for c, _ in _schema.GENERATIONS)
        s = ", ".join(f"s.{c} AS s_{c}" for c in self._score_columns())
        cols = self._select(
            f"SELECT i.*, {g}, {s} FROM run_items i "
            "LEFT JOIN generations g ON g.key = i.generation_key "
            "LEFT JOIN scores s ON s.key = i.score_key "
            "WHERE i.run_id = ? ORDER BY i.ordinal",
            [run_id],
        )
        out = []
        for r in C.rows(cols):
            gen = {k[2:]: v for k, v in r.items() if k.startswith("g_")}
            sc = {k[2:]: v for k, v in r.items() if k.startswith("s_")}
            sample = json.loads(r["sample"]) if r["sample"] is not None else None
            item = RunItem(
                ordinal=r["ordinal"],
                task_id=r["task_id"],
                sample_index=r["sample_index"],
                cluster=r["cluster"],
                generation_key=r["generation_key"],
                score_key=r["score_key"],
                sample=sample,
            )
            out.append(
                RunRow(
                    item,
                    C.generation(gen) if gen["key"] is not None else None,
                    _score(sc) if sc["key"] is not None else None,
                )
            )
        return out

    def _score_columns(self) -> list[str]:
        """The scores table's columns: a store made before ``parts`` and opened read-only
        (so not brought up to date) lacks it."""
        have = self._select(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'scores'"
        )["column_name"]
        return [c for c, _ in _schema.SCORES if c in have]

    def export(
        self, run_id: str, url: str | Path, format: Literal["parquet", "jsonl"] = "parquet"
    ) -> int:
        """Write a run's rows to ``url`` (a local path or any fsspec URL); returns the count.

        Parquet has one typed column per field (token ids and logprobs as lists, the
        sample's own fields as JSON text in ``sample``) and the run's kind and config in
        the file metadata; JSONL has one results-file object per line (``RunRow.to_result``).

        Raises:
            StoreInputError: unknown run id or format.
            StoreError: the destination cannot be written (names the URL).
        """
        if format not in ("parquet", "jsonl"):
            raise StoreInputError(f"export format must be 'parquet' or 'jsonl', got {format!r}")
        rows = self.run_items(run_id)
        info = self.get_run(run_id)
        assert info is not None  # run_items checked it
        from codegym.store import _export  # fsspec and parquet load only when exporting

        _export.write(rows, info, str(url), format)
        return len(rows)

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        names = ("generations", "scores", "trajectories", "runs", "run_items")
        sql = " UNION ALL ".join(f"SELECT '{n}', count(*) FROM {n}" for n in names)
        with self._lock:
            return {n: int(c) for n, c in self._conn().execute(sql).fetchall()}


def _score(row: dict[str, Any]) -> ScoreRecord:
    row.setdefault("parts", "")  # see Store._score_columns
    if row["parts"] is None:
        row["parts"] = ""
    return C.loaded(ScoreRecord, row)
