"""Where a scored sample's machine time goes: CPU per run of the `jail` pool for
``print(1)``, for assert tests making 0, 1, 10 and 50 calls into the program, and for the
HumanEval references, with the share of the two cores left idle (issue 19's "6x the
official evaluator" is bounded by these).

CPU is the whole machine's (``/proc/stat``: every process, the host's included) over a
burst of ``--n`` runs in flight, divided by the runs; sequential latency is the median of
150 runs one at a time.

    .venv/bin/python benchmarks/score_floor.py [--workers 2] [--n 600]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

from codegym.sandbox import AssertTest, Sandbox
from codegym.tasks import load_humaneval, score

PROGRAM = "def f(x):\n    return x\n"
TICK = os.sysconf("SC_CLK_TCK")


def machine() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return (sum(t[:3]) + sum(t[5:8])) / TICK, (t[3] + t[4]) / TICK


def asserting(calls: int) -> AssertTest:
    body = "".join(f"    assert c({i}) == {i}\n" for i in range(calls))
    return AssertTest(f"def check(c):\n{body}    pass\ncheck(f)\n", program=("f",))


async def measure(name: str, runs: list[Callable[[], Awaitable[object]]]) -> None:
    for one in runs[:20]:
        await one()
    seq = []
    for i in range(150):
        start = time.perf_counter()
        await runs[i % len(runs)]()
        seq.append(time.perf_counter() - start)
    busy0, idle0 = machine()
    start = time.perf_counter()
    await asyncio.gather(*(one() for one in runs))
    wall = time.perf_counter() - start
    busy1, idle1 = machine()
    busy, idle = busy1 - busy0, idle1 - idle0
    p50 = statistics.median(seq) * 1e3
    print(
        f"  {name:<28} {len(runs) / wall:7.0f} runs/s  seq p50 {p50:5.2f} ms"
        f"  CPU/run {busy / len(runs) * 1e3:5.2f} ms  idle {idle / (busy + idle):4.0%}"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=600)
    args = ap.parse_args()
    tasks = [t for t in load_humaneval() if t.id != "HumanEval/75"]  # its reference: 0.12 s
    print(f"jail pool, {args.workers} workers, {args.n} runs in flight per row")
    async with Sandbox(tier="jail", workers=args.workers) as sb:
        await measure("print(1)", [lambda: sb.run_python("print(1)")] * args.n)
        for calls in (0, 1, 10, 50):
            test = asserting(calls)
            run = lambda t=test: sb.run_tests(PROGRAM, [t])  # noqa: E731
            await measure(f"assert test, {calls} calls", [run] * args.n)
        he = [lambda t=t: score(sb, t, t.reference) for t in tasks]
        await measure("HumanEval references", (he * (args.n // len(he) + 1))[: args.n])


if __name__ == "__main__":
    asyncio.run(main())
