"""gVisor tier benchmark: warm per-run latency and worker start-up, against baselines.

    .venv/bin/python benchmarks/gvisor_bench.py [--runs 50]

Rows: ``print(1)`` through the ``gvisor`` tier (a fork inside one long-lived runsc
sandbox per worker) next to ``runsc exec`` into that same running sandbox (the
exec-per-run design), ``runsc do`` (a fresh sandbox per run) and the ``jail`` tier;
then the time to start a pool of 1 and 2 workers, and throughput with 2 workers.
Results go to docs/BENCHMARKS.md; absolute times drift, ratios hold better.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time

from codegym.sandbox import Sandbox

PY = "/usr/bin/python3"


def p50_ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.1f} ms"


async def warm_latency(tier: str, runs: int) -> list[float]:
    async with Sandbox(tier=tier, workers=1) as sb:
        for _ in range(5):
            await sb.run_python("print(1)")
        out = []
        for _ in range(runs):
            t = time.perf_counter()
            r = await sb.run_python("print(1)")
            out.append(time.perf_counter() - t)
            assert r.stdout == "1\n", r
        return out


async def runsc_exec_latency(runs: int) -> list[float]:
    async with Sandbox(tier="gvisor", workers=1) as sb:
        launch = sb._workers[0].launch
        assert launch is not None
        argv = launch.argv
        cid = argv[-1]
        base = argv[: argv.index("run")]
        cmd = [*base, "exec", cid, PY, "-c", "print(1)"]
        out = []
        for _ in range(runs):
            t = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, check=True)
            out.append(time.perf_counter() - t)
            assert r.stdout == b"1\n", r
        return out


def runsc_do_latency(runs: int) -> list[float]:
    cmd = ["runsc", "--network=none", "--platform=ptrace", "do", PY, "-c", "print(1)"]
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, cwd="/tmp")
        out.append(time.perf_counter() - t)
    return out


async def startup(tier: str, workers: int, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        async with Sandbox(tier=tier, workers=workers) as sb:
            out.append(time.perf_counter() - t)
            await sb.run_python("pass")
    return out


async def throughput(tier: str, n: int) -> float:
    async with Sandbox(tier=tier, workers=2) as sb:
        await asyncio.gather(*(sb.run_python("print(1)") for _ in range(4)))
        t = time.perf_counter()
        await asyncio.gather(*(sb.run_python("print(1)") for _ in range(n)))
        return n / (time.perf_counter() - t)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    n = args.runs
    gv = await warm_latency("gvisor", n)
    jail = await warm_latency("jail", n)
    ex = await runsc_exec_latency(max(10, n // 5))
    do = runsc_do_latency(max(5, n // 10))
    g = statistics.median(gv)
    print(f"print(1), warm p50 over {n} runs")
    print(f"  gvisor tier (fork in sandbox) {p50_ms(gv):>10}   min {min(gv) * 1000:.1f} ms")
    print(f"  runsc exec into that sandbox  {p50_ms(ex):>10}   x{statistics.median(ex) / g:.1f}")
    print(f"  runsc do (fresh sandbox)      {p50_ms(do):>10}   x{statistics.median(do) / g:.1f}")
    print(
        f"  jail tier                     {p50_ms(jail):>10}   x{statistics.median(jail) / g:.2f}"
    )
    for tier in ("gvisor", "jail"):
        for w in (1, 2):
            s = await startup(tier, w, 3)
            print(f"start {tier:<6} pool, {w} worker(s): p50 {p50_ms(s)}")
    for tier in ("gvisor", "jail"):
        print(f"throughput {tier:<6} 2 workers: {await throughput(tier, 4 * n):.0f} runs/s")


if __name__ == "__main__":
    asyncio.run(main())
