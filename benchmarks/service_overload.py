"""The sandbox service at twice its capacity: how long accepted work waits.

Measures the service as a separate process (``python -m codegym.service``, 2 workers,
queue 4) under an open-loop load at 2× the capacity measured first with a closed loop:
the share refused (429), and the median and p99 latency of the accepted requests. The
reliability test checks the properties (refusals, no crash, bounded memory); this prints
the figures, which depend on the machine and what else runs on it.

    .venv/bin/python benchmarks/service_overload.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

TOKEN = "bench-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {"code": "s = 0\nfor i in range(300_000):\n    s += i\nprint(s)", "limits": {"cpu_s": 2}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(url: str, seconds: float) -> None:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60, limits=limits) as http:
        t0, served = time.monotonic(), 0
        while time.monotonic() - t0 < 3:
            rs = await asyncio.gather(*(http.post("/v1/run", json=BODY) for _ in range(4)))
            served += sum(r.status_code == 200 for r in rs)
        capacity = served / (time.monotonic() - t0)
        statuses: list[int] = []
        latencies: list[float] = []

        async def one() -> None:
            t = time.monotonic()
            r = await http.post("/v1/run", json=BODY)
            statuses.append(r.status_code)
            if r.status_code == 200:
                latencies.append(time.monotonic() - t)

        tasks, k, start = [], 0, time.monotonic()
        while time.monotonic() - start < seconds:
            k += 1
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(max(0.0, start + k / (2 * capacity) - time.monotonic()))
        await asyncio.gather(*tasks)
    q = statistics.quantiles(latencies, n=100)
    print(f"capacity (closed loop)   {capacity:.1f} runs/s")
    print(f"offered (open loop, 2x)  {2 * capacity:.1f} runs/s for {seconds:.0f} s")
    print(f"refused (429)            {statuses.count(429) / len(statuses):.0%}")
    print(f"accepted latency         p50 {q[49]:.3f} s   p99 {q[98]:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    port = _free_port()
    cmd = [sys.executable, "-m", "codegym.service", "--port", str(port), "--workers", "2"]
    env = {**os.environ, "CODEGYM_TOKEN": TOKEN}
    proc = subprocess.Popen([*cmd, "--queue", "4", "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        asyncio.run(_run(url, args.seconds))
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
