"""Fixed costs a user waits on: ``codegym --help`` and ``codegym score`` on one sample (start-up,
imports, the pool's start, one sandbox run, the results written; and the time to its first
sandbox run, with ``--no-store`` and as a user types it, into the default result store),
this tree against a baseline tree side by side, medians of ``--reps`` runs each,
interleaved.

    .venv/bin/python benchmarks/startup_bench.py --baseline /tmp/old/src

``--baseline`` is the ``src`` folder of another checkout (e.g. ``git worktree add /tmp/old
db5371b``); both run with this venv's interpreter, so only the code differs. Also prints
the import time of the ``score`` command's module (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"
RUN = "import sys; sys.argv[0] = 'codegym'; from codegym.cli import main; main()"
# The same command, reporting the wall-clock time its first sandbox run starts at: what a
# user waits before any program of theirs runs (the summary's statistics come after).
FIRST = (
    "import sys, time\n"
    "import codegym.sandbox.sandbox as S\n"
    "orig = S.Sandbox.run_tests\n"
    "async def first(self, *a, **k):\n"
    "    if not getattr(S, '_seen', False):\n"
    "        S._seen = True\n"
    "        print('FIRST_RUN', time.time(), file=sys.stderr, flush=True)\n"
    "    return await orig(self, *a, **k)\n"
    "S.Sandbox.run_tests = first\n" + RUN
)


def _first_run(src: Path, args: list[str], store: Path | None = None) -> float:
    """Seconds from starting the process to its first sandbox run; with ``store``, into a
    fresh copy of that store (a user's store, without this sample's result)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    if store is not None:
        fresh = Path(tempfile.mkdtemp(prefix="startup-store-")) / "store.duckdb"
        shutil.copyfile(store, fresh)
        env["CODEGYM_STORE"] = str(fresh)
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", FIRST, *args], env=env, capture_output=True)
    m = re.search(rb"FIRST_RUN ([0-9.]+)", done.stderr)
    if done.returncode != 0 or m is None:
        raise SystemExit(f"{src}: {args} failed: {done.stderr.decode()[-800:]}")
    return float(m.group(1)) - t0


def _time(src: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN, *args], env=env, capture_output=True)
    dt = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{src}: {args} failed: {done.stderr.decode()[-800:]}")
    return dt


def _import_ms(src: Path, module: str) -> float:
    """All the import time ``import module`` costs: the sum of the cumulative times of the
    top-level imports it makes (a package's ``__init__`` may import most of it before the
    module's own line, which then shows only the rest)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    total = 0
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)$", line)
        if m and len(m.group(2)) == 1:  # one space: a top-level import, not a nested one
            total += int(m.group(1))
    return total / 1000 if total else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True, help="src/ of the baseline tree")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    from codegym.tasks import load_humaneval

    task = load_humaneval()[0]
    tmp = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    samples = tmp / "one.jsonl"
    samples.write_text(json.dumps({"task_id": task.id, "completion": task.reference}) + "\n")
    score = ["score", str(samples), "--out", str(tmp / "r.jsonl"), "--no-store", "--json"]
    cases = {"codegym --help": ["--help"], "codegym score, 1 sample": score}
    print(f"load average {os.getloadavg()[0]:.1f}; {a.reps} runs each, interleaved")
    print(f"| command | baseline ({a.baseline}) | this tree | ratio |\n|---|---|---|---|")
    for name, args in cases.items():
        base, mine = [], []
        for _ in range(a.reps):
            base.append(_time(a.baseline, args))
            mine.append(_time(HERE, args))
        b, m = statistics.median(base), statistics.median(mine)
        print(f"| {name} | {b:.3f} s | {m:.3f} s | {b / m:.1f}x |")
    base, mine = [], []
    for _ in range(a.reps):
        base.append(_first_run(a.baseline, score))
        mine.append(_first_run(HERE, score))
    b, m = statistics.median(base), statistics.median(mine)
    print(f"| codegym score, 1 sample: to its first sandbox run | {b:.3f} s | {m:.3f} s "
          f"| {b / m:.1f}x |")  # fmt: skip
    # as a user types it: into the default result store (an existing one, copied each run)
    from codegym.store import Store

    store = tmp / "store.duckdb"
    Store(store).close()
    stored = [a for a in score if a != "--no-store"]
    base, mine = [], []
    for _ in range(a.reps):
        base.append(_first_run(a.baseline, stored, store))
        mine.append(_first_run(HERE, stored, store))
    b, m = statistics.median(base), statistics.median(mine)
    print(f"| codegym score, 1 sample, into the store: to its first sandbox run | {b:.3f} s "
          f"| {m:.3f} s | {b / m:.1f}x |")  # fmt: skip
    mod = "codegym.cli.score_cmd"
    base_ms, mine_ms = _import_ms(a.baseline, mod), _import_ms(HERE, mod)
    ratio = base_ms / mine_ms if mine_ms else float("nan")
    print(f"| import {mod} (all it imports) | {base_ms:.0f} ms | {mine_ms:.0f} ms | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
