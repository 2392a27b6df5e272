"""kill -9 a real writer process mid-batch: the file reopens, holds only whole batches,
and re-running the same writes completes it with nothing duplicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from codegym.store import Store

WRITER = """
import sys
from codegym.store import RunItem, ScoreRecord, Store, content_key

path, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Store(path) as s:
    s.begin_run("crash", "score", {"size": size})
    for b in range(batches):
        scores = [
            ScoreRecord(content_key("score", b=b, j=j), j % 3 == 0,
                        "pass" if j % 3 == 0 else "fail", "detail " * 30, cpu_s=0.01, wall_s=0.02)
            for j in range(size)
        ]
        items = [RunItem(b * size + j, f"T/{j}", b, score_key=sc.key)
                 for j, sc in enumerate(scores)]
        with s.transaction():  # one batch: its scores and its run items commit together
            s.put_scores(scores)
            s.add_run_items("crash", items)
        print(b, flush=True)
"""


def _writer(path: Path, batches: int, size: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(batches), str(size)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def _check_whole_batches(path: Path, size: int) -> int:
    """Opens the file as the store does, then checks it with plain SQL; returns batches."""
    with Store(path) as s:
        counts = s.counts()
    con = duckdb.connect(str(path), read_only=True)
    try:
        n, distinct = con.execute("SELECT count(*), count(DISTINCT key) FROM scores").fetchall()[0]
        per_batch = con.execute(
            "SELECT sample_index, count(*), count(s.key) FROM run_items i "
            "LEFT JOIN scores s ON s.key = i.score_key GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    assert n == distinct == counts["scores"] == counts["run_items"]
    assert n % size == 0, f"a partial batch survived: {n} rows, batch size {size}"
    assert all(rows == joined == size for _, rows, joined in per_batch)
    return n // size


@pytest.mark.parametrize(("size", "delay_s"), [(400, 0.0), (400, 0.013), (3000, 0.05)])
def test_kill_9_mid_write_loses_only_the_open_batch(
    tmp_path: Path, size: int, delay_s: float
) -> None:
    path = tmp_path / "s.duckdb"
    proc = _writer(path, 10_000, size)
    assert proc.stdout is not None
    committed = -1
    while committed < 3:  # let a few batches commit, so there is something to lose
        line = proc.stdout.readline()
        assert line, "the writer died before committing three batches"
        committed = int(line)
    time.sleep(delay_s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    kept = _check_whole_batches(path, size)
    assert kept >= committed + 1  # every batch the writer saw committed is there

    # Re-running the same writes finishes the job and duplicates nothing.
    total = kept + 2
    rerun = _writer(path, total, size)
    out, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0 and out.split()[-1] == str(total - 1)
    assert _check_whole_batches(path, size) == total
    with Store(path) as s:
        assert s.get_run("crash").status == "running"  # type: ignore[union-attr]
        assert s.counts()["runs"] == 1
