"""Sandbox service benchmark: the HTTP service against the in-process ``Sandbox``, side by
side in one run, same worker count, same programs.

    .venv/bin/python benchmarks/service_bench.py            # full
    .venv/bin/python benchmarks/service_bench.py --quick    # fewer runs

Sections:
  latency     print(1), one call at a time: p50/p90 in-process vs through the service
              (client + loopback HTTP + server), and the p50 added (target <= 2 ms).
  batch       100 assert tests in one request (``run_tests``): median time both ways.
  throughput  runs/s with 16 calls in flight, for print(1) and for a ~20 ms CPU program
              (target: service >= 80% of in-process).

The service runs as its own process (``python -m codegym.service``), as in production;
the in-process pool is closed before it starts, so the two never share the CPUs.
Results are recorded in docs/BENCHMARKS.md.
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


async def _measure(sb: Runner, quick: bool) -> dict[str, Any]:
    k = 1 if quick else 3
    await _latency(sb, 20)  # warm up: connections, zygotes
    lat = await _latency(sb, 100 * k)
    batch = await _batch(sb, 5 * k)
    trivial = await _throughput(sb, "print(1)", 300 * k)
    cpu = await _throughput(sb, CPU_PROGRAM, 60 * k)
    return {
        "p50_ms": statistics.median(lat),
        "p90_ms": _pct(lat, 90),
        "batch100_ms": statistics.median(batch),
        "trivial_per_s": trivial,
        "cpu_per_s": cpu,
    }


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


async def _run(section: Callable[[Runner], Awaitable[dict[str, Any]]], remote: bool, w: int):
    if not remote:
        async with Sandbox(workers=w) as sb:
            return await section(sb)
    with _service(w) as url:
        async with RemoteSandbox(url, token=TOKEN) as rsb:
            return await section(rsb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    def section(sb: Runner) -> Awaitable[dict[str, Any]]:
        return _measure(sb, args.quick)

    local = asyncio.run(_run(section, False, args.workers))
    remote = asyncio.run(_run(section, True, args.workers))
    result = {
        "workers": args.workers,
        "in_process": local,
        "service": remote,
        "added_p50_ms": remote["p50_ms"] - local["p50_ms"],
        "batch100_added_ms": remote["batch100_ms"] - local["batch100_ms"],
        "trivial_throughput_ratio": remote["trivial_per_s"] / local["trivial_per_s"],
        "cpu_throughput_ratio": remote["cpu_per_s"] / local["cpu_per_s"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"workers={args.workers} (in-process Sandbox vs service over loopback HTTP)")
    print(f"{'':24}{'in-process':>12}{'service':>12}")
    for key, label in [
        ("p50_ms", "print(1) p50 ms"),
        ("p90_ms", "print(1) p90 ms"),
        ("batch100_ms", "100-test batch ms"),
        ("trivial_per_s", "print(1) runs/s"),
        ("cpu_per_s", "20 ms-CPU runs/s"),
    ]:
        print(f"{label:24}{local[key]:12.2f}{remote[key]:12.2f}")
    print(f"added p50: {result['added_p50_ms']:.2f} ms (target <= 2 ms)")
    print(
        f"throughput ratio: print(1) {result['trivial_throughput_ratio']:.0%}, "
        f"CPU program {result['cpu_throughput_ratio']:.0%} (target >= 80%)"
    )


if __name__ == "__main__":
    main()
