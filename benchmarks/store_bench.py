"""Result-store benchmark: batched put/get at eval (3,280) and RL (100k) scale.

    .venv/bin/python benchmarks/store_bench.py            # 3,280 and 100k
    .venv/bin/python benchmarks/store_bench.py --quick    # 3,280 only

Prints medians for: put of new records (one transaction), put of the same records again
(all conflicts: the resume path), get of every key in one call, and a cold resume: a
fresh interpreter that imports codegym.store, opens the file and looks up 3,280 scores
and 3,280 generations (what re-running a finished 164 x 20 eval costs). Named baselines
in the same run: one SELECT per key, and ``executemany`` INSERTs. Generations carry 200
token ids and logprobs each; scores a 100-character detail. Record results in
docs/BENCHMARKS.md; absolute times drift with machine load, ratios hold better.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from codegym.store import GenerationRecord, ScoreRecord, Store, content_key

COLD = """
import sys, time
t0 = time.perf_counter()
from codegym.store import Store, content_key
t1 = time.perf_counter()
s = Store(sys.argv[1])
t2 = time.perf_counter()
n = int(sys.argv[2])
got = s.get_scores([content_key("score", i=i) for i in range(n)])
gen = s.get_generations([content_key("generation", i=i) for i in range(n)])
t3 = time.perf_counter()
assert len(got) == len(gen) == n, (len(got), len(gen))
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {t3 - t2:.4f}")
"""


def scores(n: int, offset: int = 0) -> list[ScoreRecord]:
    return [
        ScoreRecord(content_key("score", i=i), i % 3 == 0, "pass" if i % 3 == 0 else "fail",
              "AssertionError: " + "x" * 84, cpu_s=0.012, wall_s=0.02)
        for i in range(offset, offset + n)
    ]  # fmt: skip


def generations(n: int) -> list[GenerationRecord]:
    ids, lps = list(range(200)), [-0.25] * 200
    return [
        GenerationRecord(content_key("generation", i=i), "    return sorted(xs)\n" * 8, "stop",
                   token_ids=ids, logprobs=lps, tokens_in=150, tokens_out=200, model_s=0.4)
        for i in range(n)
    ]  # fmt: skip


def median_s(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(n: int, reps: int, tmp: Path) -> None:
    sc, gen = scores(n), generations(n)
    keys = [s.key for s in sc]
    put_new: list[float] = []
    put_gen: list[float] = []
    for r in range(reps):  # a fresh file per rep, so every put is of new keys
        with Store(tmp / f"new-{n}-{r}.duckdb") as st:
            put_new.append(median_s(lambda st=st: st.put_scores(sc), 1))
            put_gen.append(median_s(lambda st=st: st.put_generations(gen), 1))
    path = tmp / f"full-{n}.duckdb"
    with Store(path) as st:
        st.put_scores(sc)
        st.put_generations(gen)
        again = median_s(lambda: st.put_scores(sc), reps)
        get_s = median_s(lambda: st.get_scores(keys), reps)
        get_g = median_s(lambda: st.get_generations([g.key for g in gen]), reps)
    print(f"\n== {n:,} records (medians of {reps}) ==")
    print(f"put scores, new          {statistics.median(put_new) * 1e3:9.1f} ms")
    print(f"put generations, new     {statistics.median(put_gen) * 1e3:9.1f} ms")
    print(f"put scores, all present  {again * 1e3:9.1f} ms")
    print(f"get scores, one call     {get_s * 1e3:9.1f} ms")
    print(f"get generations          {get_g * 1e3:9.1f} ms")
    if n <= 10_000:
        baselines(path, sc, keys, get_s, reps)
        cold(path, n, reps)


def baselines(path: Path, sc: list[ScoreRecord], keys: list[str], get_s: float, reps: int) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    try:
        one_by_one = median_s(
            lambda: [con.execute("SELECT * FROM scores WHERE key = ?", [k]).fetchall()
                     for k in keys],
            reps,
        )  # fmt: skip
        con.execute("CREATE TABLE naive AS SELECT * FROM scores LIMIT 0")
        rows = [(s.key, s.passed, s.outcome, s.detail, s.cpu_s, s.wall_s, s.flaky, s.created)
                for s in sc]  # fmt: skip
        t = time.perf_counter()
        con.executemany("INSERT INTO naive VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        many = time.perf_counter() - t
    finally:
        con.close()
    print(
        f"baseline: one SELECT/key {one_by_one * 1e3:9.1f} ms  ({one_by_one / get_s:.0f}x slower)"
    )
    print(f"baseline: executemany    {many * 1e3:9.1f} ms  (put scores, new: see above)")


def cold(path: Path, n: int, reps: int) -> None:
    runs = []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", COLD, str(path), str(n)], capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        runs.append([float(x) for x in out.stdout.split()])
    imp, opn, look = (statistics.median(col) for col in zip(*runs, strict=True))
    print(f"cold resume: import {imp * 1e3:.0f} ms + open {opn * 1e3:.0f} ms + "
          f"get {n:,} scores and generations {look * 1e3:.0f} ms = "
          f"{(imp + opn + look) * 1e3:.0f} ms")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3,280 records only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bench(3_280, 5, Path(d))
        if not args.quick:
            bench(100_000, 3, Path(d))


if __name__ == "__main__":
    main()
