"""Store on a real DuckDB file: records, idempotence, runs, locking, bad files, bad input."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

import codegym.store
from codegym.store import (
    DictCache,
    GenerationRecord,
    RunItem,
    ScoreRecord,
    Store,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreInputError,
    StoreLocked,
    TrajectoryRecord,
    content_key,
    default_store_path,
)


def key(i: int, kind: str = "score") -> str:
    return content_key(kind, i=i)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "s.duckdb") as s:
        yield s  # type: ignore[misc]


def test_public_surface_is_pinned() -> None:
    assert sorted(codegym.store.__all__) == sorted(
        ["DictCache", "GenerationRecord", "RunInfo", "RunItem", "RunRow", "RunStatus",
         "ScoreRecord", "Store", "StoreClosed", "StoreCorrupt", "StoreError", "StoreInputError",
         "StoreLocked", "TrajectoryRecord", "canonical", "content_key", "default_store_path"]
    )  # fmt: skip


def test_generations_round_trip_token_exact(tmp_path: Path) -> None:
    g = GenerationRecord(
        key(1, "generation"), "def f(): ...", "length", token_ids=[5, 2**40, 0],
        logprobs=[-0.125, -math.inf, 0], tokens_in=12, tokens_out=3, model_s=0.25,
    )  # fmt: skip
    with Store(tmp_path / "s.duckdb") as s:
        assert s.put_generations([g]) == 1
    with Store(tmp_path / "s.duckdb") as s:  # survives reopening the file
        back = s.get_generations([g.key, key(2, "generation")])
    assert back == {g.key: g}
    assert back[g.key].token_ids == (5, 2**40, 0) and back[g.key].logprobs[1] == -math.inf


def test_put_is_write_once_and_counts_new_keys(store: Store) -> None:
    first = [ScoreRecord(key(i), i % 2 == 0, "pass" if i % 2 == 0 else "fail") for i in range(10)]
    assert store.put_scores(first) == 10
    again = [ScoreRecord(key(i), False, "timeout", "later") for i in range(15)]
    assert store.put_scores(again) == 5  # only the 5 unseen keys
    got = store.get_scores(key(i) for i in range(15))
    assert len(got) == 15 and store.counts()["scores"] == 15
    assert got[key(0)].outcome == "pass" and got[key(12)].outcome == "timeout"  # first wins


def test_duplicates_inside_one_batch_keep_the_first(store: Store) -> None:
    batch = [ScoreRecord(key(1), True, "pass"), ScoreRecord(key(1), False, "fail")]
    assert store.put_scores(batch) == 1
    assert store.get_scores([key(1)])[key(1)].outcome == "pass"


def test_empty_calls_are_no_ops(store: Store) -> None:
    assert store.put_scores([]) == 0
    assert store.get_scores([]) == {}
    assert store.get_generations(iter([])) == {}


def test_trajectories_round_trip_and_query(store: Store) -> None:
    ts = [
        TrajectoryRecord(key(i, "trajectory"),
                         {"turns": [{"role": "user", "text": "hi"}], "lp": [-1.5]},
                   run_id="r1" if i < 3 else "r2", task_id=f"T/{i % 2}", reward=i / 2,
                   outcome="pass", created=float(i))
        for i in range(5)
    ]  # fmt: skip
    assert store.put_trajectories(ts) == 5
    assert store.get_trajectories([ts[4].key]) == {ts[4].key: ts[4]}
    assert [t.key for t in store.find_trajectories(run_id="r1")] == [t.key for t in ts[:3]]
    assert [t.reward for t in store.find_trajectories(run_id="r1", task_id="T/0")] == [0.0, 1.0]
    assert len(store.find_trajectories()) == 5


def test_transaction_is_atomic(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.put_scores([ScoreRecord(key(1), True, "pass")])
        store.put_generations([GenerationRecord(key(1, "generation"), "x")])
        raise RuntimeError("boom")
    assert store.counts()["scores"] == 0 and store.counts()["generations"] == 0
    with store.transaction():
        store.put_scores([ScoreRecord(key(1), True, "pass")])
    assert store.counts()["scores"] == 1


def test_runs_begin_resume_and_conflict(store: Store) -> None:
    info = store.begin_run("r1", "eval", {"model": "m", "temperature": 0.2})
    assert info.status == "running" and info.config == {"model": "m", "temperature": 0.2}
    store.finish_run("r1", "interrupted")
    assert store.get_run("r1").status == "interrupted"  # type: ignore[union-attr]
    resumed = store.begin_run("r1", "eval", {"temperature": 0.2, "model": "m"})
    assert resumed.status == "running" and resumed.created == info.created
    with pytest.raises(StoreInputError, match="different kind or config"):
        store.begin_run("r1", "eval", {"model": "other", "temperature": 0.2})
    with pytest.raises(StoreInputError, match="finished, failed, interrupted"):
        store.finish_run("r1", "done")  # type: ignore[arg-type]
    with pytest.raises(StoreInputError, match="no run 'nope'"):
        store.finish_run("nope")
    store.finish_run("r1")
    assert [r.status for r in store.list_runs()] == ["finished"]


def test_run_items_fill_in_and_join_in_order(store: Store) -> None:
    store.begin_run("r", "eval", {})
    gk, sk = key(1, "generation"), key(1)
    store.put_generations([GenerationRecord(gk, "return 1", "stop", tokens_out=3)])
    store.add_run_items("r", [RunItem(1, "T/1", 0, generation_key=gk), RunItem(0, "T/0")])
    rows = store.run_items("r")
    assert [r.item.ordinal for r in rows] == [0, 1]
    assert rows[0].generation is None and rows[1].generation.text == "return 1"  # type: ignore[union-attr]
    assert rows[1].score is None and rows[1].to_result()["passed"] is None
    # Scored later: the score key fills in, the generation key is kept.
    store.put_scores([ScoreRecord(sk, True, "pass", cpu_s=0.01, wall_s=0.02)])
    store.add_run_items("r", [RunItem(1, "T/1", 0, score_key=sk)])
    row = store.run_items("r")[1]
    assert row.item.generation_key == gk and row.score.passed  # type: ignore[union-attr]
    res = row.to_result()
    assert res["completion"] == "return 1" and res["tokens_out"] == 3 and res["cluster"] == "T/1"
    assert store.counts()["run_items"] == 2
    with pytest.raises(StoreInputError, match="item 1 is"):
        store.add_run_items("r", [RunItem(1, "T/9", 0)])
    with pytest.raises(StoreInputError, match="begin_run first"):
        store.add_run_items("missing", [RunItem(0, "T/0")])


def test_dict_cache_speaks_plain_dicts(store: Store) -> None:
    cache = DictCache(store)
    cache.put_scores([(key(1), {"passed": True, "outcome": "pass", "detail": "", "cpu_s": 0.1,
                                "wall_s": 0.2, "flaky": True})])  # fmt: skip
    cache.put_generations([(key(2, "generation"), {"text": "t", "finish_reason": "stop"})])
    assert cache.get_scores([key(1)])[key(1)]["flaky"] is True
    assert cache.get_generations([key(2, "generation")])[key(2, "generation")]["text"] == "t"
    with pytest.raises(StoreInputError, match=r"unknown field\(s\) \['colour'\]"):
        cache.put_scores([(key(3), {"passed": True, "outcome": "pass", "colour": 1})])
    with pytest.raises(StoreInputError, match="outcome"):
        cache.put_scores([(key(3), {"passed": True})])


def test_concurrent_threads_share_one_store(store: Store) -> None:
    def work(t: int) -> None:
        for b in range(5):
            batch = [ScoreRecord(key(t * 1000 + b * 10 + j), True, "pass") for j in range(10)]
            store.put_scores(batch)
            assert len(store.get_scores(s.key for s in batch)) == 10

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert store.counts()["scores"] == 300


# -- opening: locks, bad files, read-only ----------------------------------------------

HOLD = """
import sys
from codegym.store import Store
s = Store(sys.argv[1], read_only=sys.argv[2] == "ro")
print("open", flush=True)
sys.stdin.read()
"""


def _holder(path: Path, mode: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().strip() == "open"
    return p


def test_a_second_writer_process_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    holder = _holder(path, "rw")
    try:
        with pytest.raises(StoreLocked) as e:
            Store(path)
        msg = str(e.value)
        assert str(path) in msg and "--store" in msg and f"PID {holder.pid}" in msg
        with pytest.raises(StoreLocked):
            Store(path, read_only=True)
    finally:
        holder.communicate("")
    Store(path).close()  # free again once the holder exits


def test_readers_share_a_file_but_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store(path) as s:
        s.put_scores([ScoreRecord(key(1), True, "pass")])
    holder = _holder(path, "ro")
    try:
        with Store(path, read_only=True) as ro:
            assert key(1) in ro.get_scores([key(1)])
            with pytest.raises(StoreError, match="read-only"):
                ro.put_scores([ScoreRecord(key(2), True, "pass")])
    finally:
        holder.communicate("")


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"this is not a database" * 300, "not a DuckDB database"), (b"", "not a DuckDB database")],
)
def test_a_non_duckdb_file_is_refused_naming_the_path(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "results.duckdb"
    path.write_bytes(content)
    with pytest.raises(StoreCorrupt) as e:
        Store(path)
    assert str(path) in str(e.value) and why in str(e.value)
    assert path.read_bytes() == content  # left untouched


def test_another_applications_duckdb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE sales (id INTEGER)")
    con.close()
    with pytest.raises(StoreCorrupt, match="another application"):
        Store(path)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE codegym_meta SET value = '99' WHERE name = 'schema_version'")
    con.close()
    with pytest.raises(StoreCorrupt, match="newer codegym"):
        Store(path)


def test_directory_and_missing_read_only_paths(tmp_path: Path) -> None:
    with pytest.raises(StoreCorrupt, match="directory"):
        Store(tmp_path)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "none.duckdb", read_only=True)


def test_default_path_honours_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODEGYM_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "codegym" / "store.duckdb"
    monkeypatch.setenv("CODEGYM_STORE", str(tmp_path / "mine.duckdb"))
    with Store() as s:
        assert s.path == tmp_path / "mine.duckdb"
    assert (tmp_path / "mine.duckdb").exists()


def test_closed_store_refuses_calls(tmp_path: Path) -> None:
    s = Store(tmp_path / "s.duckdb")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreClosed):
        s.get_scores([key(1)])


# -- bad records ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ScoreRecord(key(1), "yes", "pass"), "ScoreRecord.passed must be bool"),  # type: ignore[arg-type]
        (lambda: ScoreRecord(key(1), True, ""), "outcome"),
        (lambda: ScoreRecord("HumanEval/0", True, "pass"), "not a content key"),
        (lambda: ScoreRecord(key(1), True, "pass", cpu_s=True), "ScoreRecord.cpu_s"),  # type: ignore[arg-type]
        (lambda: GenerationRecord(key(1), b"x"), "GenerationRecord.text must be str"),  # type: ignore[arg-type]
        (lambda: GenerationRecord(key(1), "x", token_ids=[1, True]), "token_ids"),
        (lambda: GenerationRecord(key(1), "x", token_ids="12"), "token_ids"),  # type: ignore[arg-type]
        (lambda: GenerationRecord(key(1), "x", token_ids=[1, 2], logprobs=[-1.0]), "aligned"),
        (lambda: GenerationRecord(key(1), "x", tokens_out=1.5), "tokens_out"),  # type: ignore[arg-type]
        (lambda: TrajectoryRecord(key(1), [1, 2]), "TrajectoryRecord.data"),  # type: ignore[arg-type]
        (lambda: TrajectoryRecord(key(1), {}, reward=math.nan), "NaN"),
        (lambda: RunItem(-1, "T/0"), "ordinal"),
        (lambda: RunItem(0, "T/0", score_key="abc"), "RunItem.score_key"),
    ],
)
def test_bad_records_are_refused_by_field(make: object, match: str) -> None:
    with pytest.raises(StoreInputError, match=match):
        make()  # type: ignore[operator]


def test_bad_batches_are_refused(store: Store) -> None:
    with pytest.raises(StoreInputError, match="takes ScoreRecord records, got dict"):
        store.put_scores([{"key": key(1), "passed": True}])  # type: ignore[list-item]
    with pytest.raises(StoreInputError, match="wrap a single one in a list"):
        store.put_scores(ScoreRecord(key(1), True, "pass"))  # type: ignore[arg-type]
    with pytest.raises(StoreInputError, match="not a content key"):
        store.get_scores(["HumanEval/0"])
    with pytest.raises(StoreInputError, match="wrap a single one"):
        store.get_scores(key(1))
    bad = TrajectoryRecord(key(1, "trajectory"), {"tags": {"a", "b"}})
    with pytest.raises(StoreInputError, match="not JSON-serializable"):
        store.put_trajectories([bad])
    with pytest.raises(StoreInputError, match="value the store cannot hold"):
        store.put_generations([GenerationRecord(key(1, "generation"), "x", token_ids=[2**70])])
    with pytest.raises(StoreInputError, match=r"config\['when'\]"):
        store.begin_run("r", "eval", {"when": object()})
    assert store.counts() == dict.fromkeys(
        ["generations", "scores", "trajectories", "runs", "run_items"], 0
    )


def test_reopening_mends_a_table_or_index_gone_missing(tmp_path: Path) -> None:
    """A store of the current schema skips the DDL on open, but only while every table and
    index the DDL makes is there."""
    path = tmp_path / "s.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("DROP INDEX trajectories_run")
    con.execute("DROP TABLE run_items")
    con.close()
    Store(path).close()
    con = duckdb.connect(str(path), read_only=True)
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    indexes = {r[0] for r in con.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    con.close()
    assert "run_items" in tables and "trajectories_run" in indexes
