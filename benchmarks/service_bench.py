"""Sandbox service benchmark: the HTTP service against the in-process ``Sandbox``, side by
side in one run, same worker count, same programs.

    .venv/bin/python benchmarks/service_bench.py            # full
    .venv/bin/python benchmarks/service_bench.py --quick    # fewer runs
    .venv/bin/python benchmarks/service_bench.py --sweep    # + print(1) at 2, 4, 8 in flight

Sections:
  latency     print(1), one call at a time: p50/p90 in-process vs through the service
              (client + loopback HTTP + server), and the p50 added (target <= 2 ms).
  batch       100 assert tests in one request (``run_tests``): median time both ways.
  throughput  runs/s with 16 calls in flight, for print(1) and for a ~20 ms CPU program
              (target: service >= 80% of in-process); also through a client that sends
              every call on its own request (``batching=None``), the baseline of batching.
  sweep       (--sweep) print(1) runs/s at 2, 4 and 8 calls in flight, batching client
              against the one-request-per-call client: batching must not cost light load.

The service runs as its own process (``python -m codegym.service``), as in production,
next to an in-process pool of the same size; only one of them is driven at a time (an
idle pool costs no CPU). Each section alternates between the two for several rounds and
reports the median of each side and of the per-round ratios, so the VM's drifting speed
hits both sides alike. Results are recorded in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx

from codegym.sandbox import AssertTest, ExecResult, Limits, Sandbox
from codegym.service import RemoteSandbox

TOKEN = "bench-token-0123456789abcdef"
LIMITS = Limits(cpu_s=2, wall_s=10)
CPU_PROGRAM = "s = 0\nfor i in range(150_000):\n    s += i\nprint(s)"
Runner = Any  # Sandbox or RemoteSandbox: the same methods


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else xs[0]


async def _latency(sb: Runner, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r: ExecResult = await sb.run_python("print(1)", limits=LIMITS)
        out.append((time.perf_counter() - t) * 1000)
        assert r.stdout == "1\n", r
    return out


async def _batch(sb: Runner, n: int) -> list[float]:
    tests = [AssertTest(f"assert f({i}) == {i + 1}") for i in range(100)]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await sb.run_tests("def f(x):\n    return x + 1\n", tests, limits=LIMITS)
        out.append((time.perf_counter() - t) * 1000)
        assert r.passed and len(r.tests) == 100, r
    return out


async def _throughput(sb: Runner, code: str, n: int, in_flight: int = 16) -> float:
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            r = await sb.run_python(code, limits=LIMITS)
            assert r.ok, r

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t)


@contextlib.contextmanager
def _service(workers: int) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "codegym.service", "--port", str(port)]
    cmd += ["--workers", str(workers), "--queue", "64", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env={**os.environ, "CODEGYM_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


async def _rounds(
    sides: dict[str, Runner], rounds: int, measure: Callable[[Runner], Awaitable[float]]
) -> dict[str, float]:
    """Medians of ``measure`` on each side (the first is the base), and of each other
    side's per-round ratio to the base (``<side>_ratio``)."""
    got: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, runner in sides.items():
            got[name].append(await measure(runner))
    base, *others = sides
    out = {name: statistics.median(xs) for name, xs in got.items()}
    for name in others:
        ratios = [y / x for x, y in zip(got[base], got[name], strict=True)]
        out[f"{name}_ratio"] = statistics.median(ratios)
    return out


async def _compare(workers: int, quick: bool, sweep: bool) -> dict[str, Any]:
    rounds = 3 if quick else 5

    async def p50(sb: Runner) -> float:
        return statistics.median(await _latency(sb, 60))

    async def p90(sb: Runner) -> float:
        return _pct(await _latency(sb, 60), 90)

    async def batch(sb: Runner) -> float:
        return statistics.median(await _batch(sb, 2))

    async def trivial(sb: Runner) -> float:
        return await _throughput(sb, "print(1)", 600)

    async def cpu(sb: Runner) -> float:
        return await _throughput(sb, CPU_PROGRAM, 120)

    sequential = [("p50_ms", p50), ("p90_ms", p90), ("batch100_ms", batch)]
    concurrent = [("trivial_per_s", trivial), ("cpu_per_s", cpu)]
    out: dict[str, Any] = {"workers": workers, "rounds": rounds}
    with _service(workers) as url:
        async with (
            Sandbox(workers=workers) as local,
            RemoteSandbox(url, token=TOKEN) as remote,
            RemoteSandbox(url, token=TOKEN, batching=None) as alone,
        ):
            for sb in (local, remote, alone):
                await _latency(sb, 20)  # warm up: connections, zygotes, learnt capacity
            for name, fn in sequential:  # one call at a time: batching never applies
                out[name] = await _rounds({"in_process": local, "service": remote}, rounds, fn)
            sides = {"in_process": local, "service": remote, "service_alone": alone}
            for name, fn in concurrent:
                out[name] = await _rounds(sides, rounds, fn)
            for k in (2, 4, 8) if sweep else ():

                async def light(sb: Runner, k: int = k) -> float:
                    return await _throughput(sb, "print(1)", 300, in_flight=k)

                out[f"in_flight_{k}"] = await _rounds(sides, rounds, light)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sweep", action="store_true", help="also 2, 4 and 8 calls in flight")
    args = ap.parse_args()
    result = asyncio.run(_compare(args.workers, args.quick, args.sweep))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"workers={args.workers}, {result['rounds']} alternating rounds "
        "(in-process Sandbox vs service over loopback HTTP), medians"
    )
    print(f"{'':24}{'in-process':>12}{'service':>12}{'ratio':>8}{'unbatched':>11}{'ratio':>8}")
    for key, label in [
        ("p50_ms", "print(1) p50 ms"),
        ("p90_ms", "print(1) p90 ms"),
        ("batch100_ms", "100-test batch ms"),
        ("trivial_per_s", "print(1) runs/s"),
        ("cpu_per_s", "20 ms-CPU runs/s"),
        *[(f"in_flight_{k}", f"print(1) runs/s, {k} in fl.") for k in (2, 4, 8)],
    ]:
        if key not in result:
            continue
        r = result[key]
        row = f"{label:24}{r['in_process']:12.2f}{r['service']:12.2f}{r['service_ratio']:8.2f}"
        if "service_alone" in r:
            row += f"{r['service_alone']:11.2f}{r['service_alone_ratio']:8.2f}"
        print(row)
    added = result["p50_ms"]["service"] - result["p50_ms"]["in_process"]
    print(f"added p50: {added:.2f} ms (target <= 2 ms)")
    trivial, cpu = result["trivial_per_s"], result["cpu_per_s"]
    print(
        f"throughput ratio: print(1) {trivial['service_ratio']:.0%}, CPU program "
        f"{cpu['service_ratio']:.0%} (target >= 80%); one request per call: print(1) "
        f"{trivial['service_alone_ratio']:.0%}, CPU program {cpu['service_alone_ratio']:.0%}"
    )


if __name__ == "__main__":
    main()
