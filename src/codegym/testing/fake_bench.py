"""How close the fake server, and ``OpenAIPolicy`` against it, come to ideal throughput.

Ideal requests/s with fixed latency is ``concurrency / latency_s`` (64 / 0.05 s = 1280).
Two clients are measured against the fake served from its own process (so client and
server do not share a GIL):

* ``raw``: a minimal asyncio HTTP/1.1 keep-alive client (pre-built request bytes), which
  costs little, so its rate shows the *server's* capacity;
* ``policy``: ``OpenAIPolicy`` (aiohttp session), the path evals really use.

Run: ``python -m codegym.testing.fake_bench --requests 3000``. Prints one JSON object with
requests/s, the fraction of ideal and CPU ms per request for client and server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Coroutine
from typing import Any

from codegym.policies.openai_policy import OpenAIPolicy
from codegym.policies.policy import SamplingParams


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _raw_client(host: str, port: int, path: str, n: int, concurrency: int) -> None:
    body = json.dumps({"model": "fake-model", "prompt": "def f(x):\n", "max_tokens": 64}).encode()
    req = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    todo = [n]

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        while todo[0] > 0:
            todo[0] -= 1
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _policy_client(base_url: str, n: int, concurrency: int) -> None:
    params = SamplingParams(max_tokens=64)
    async with OpenAIPolicy(base_url, "fake-model", concurrency=concurrency) as policy:
        await asyncio.gather(*(policy.generate(f"def f{i}(x):\n", params) for i in range(n)))


def measure(requests: int, concurrency: int, latency_s: float) -> dict[str, Any]:
    # -W: runpy warns that the package __init__ imported the module it is about to run
    argv = ["-m", "codegym.testing.fake_openai"]
    proc = subprocess.Popen(
        [sys.executable, *argv, "--latency", str(latency_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        hostport = base_url.split("//", 1)[1].split("/", 1)[0]
        host, port = hostport.rsplit(":", 1)
        ideal = concurrency / latency_s
        out: dict[str, Any] = {
            "concurrency": concurrency,
            "latency_s": latency_s,
            "ideal_rps": ideal,
        }

        def make(name: str, k: int) -> Coroutine[Any, Any, None]:
            if name == "raw":
                return _raw_client(host, int(port), "/v1/completions", k, concurrency)
            return _policy_client(base_url, k, concurrency)

        for name in ("raw", "policy"):
            asyncio.run(make(name, concurrency))  # warm-up: connections, imports
            s0, c0, t0 = _cpu_s(proc.pid), time.process_time(), time.perf_counter()
            asyncio.run(make(name, requests))
            wall = time.perf_counter() - t0
            out[name] = {
                "rps": round(requests / wall, 1),
                "fraction_of_ideal": round(requests / wall / ideal, 3),
                "client_cpu_ms": round((time.process_time() - c0) / requests * 1e3, 3),
                "server_cpu_ms": round((_cpu_s(proc.pid) - s0) / requests * 1e3, 3),
            }
        return out
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m codegym.testing.fake_bench")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    print(json.dumps(measure(args.requests, args.concurrency, args.latency), indent=1))


if __name__ == "__main__":
    main()
