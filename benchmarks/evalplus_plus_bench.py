"""HumanEval+ and MBPP+ as released, base and plus inputs: codegym against evalplus's own
evaluator on the same samples, per-sample agreement and speed, offline.

    /work/main/.venv/bin/python -m venv /work/evalplus-venv        # once; kept out of .venv
    /work/evalplus-venv/bin/pip install evalplus==0.3.1
    .venv/bin/python benchmarks/evalplus_plus_bench.py humaneval    # ~1,150 samples
    .venv/bin/python benchmarks/evalplus_plus_bench.py mbpp         # ~1,130 samples

The data are the EvalPlus release files (HumanEvalPlus v0.1.10, MbppPlus v0.2.0; default
``../shared/data/evalplus``), given to evalplus by ``HUMANEVAL_OVERRIDE_PATH`` /
``MBPP_OVERRIDE_PATH`` and to codegym as ``--suite`` files. Samples per task: the
reference solution, AST mutants of it (codegym's mutation engine: flipped comparisons,
off-by-ones, dropped branches, ...; many are still right, many are wrong), and for every
tenth task a program that never returns. Both sides use 2 workers, one after the other
in one run: evalplus as ``evaluate(dataset, samples, parallel=2)`` in a subprocess of its
venv (a cold cache: expected outputs computed in the timing), codegym as ``score`` over
``Sandbox(workers=2)`` (its judge computes expected outputs the first time a worker meets a
task, also in the timing).

Agreement is per sample and per verdict (base, plus): evalplus's ``base_status`` /
``plus_status`` == "pass" against codegym's ``Score.parts``. Known, documented differences
(docs/evalplus.md) are counted apart.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalplus_bench import evalplus_python  # this folder is on sys.path when run

from codegym.sandbox import Sandbox
from codegym.tasks import Task, load_suite, score
from codegym.tasks.swe.mutate import find_mutants

WORKERS = 2
FILES = {"humaneval": "HumanEvalPlus.jsonl.gz", "mbpp": "MbppPlus.jsonl.gz"}
MUTANTS = {"humaneval": 6, "mbpp": 2}
KNOWN = {
    "HumanEval/32": "evalplus 0.3.1's find_zero oracle `continue`s past its bookkeeping and "
    "fails every program; codegym judges |poly(x)| <= atol as the oracle means",
    "Mbpp/255": "its largest plus input's answer is 1.66 million 77-tuples (over 1 GB): past "
    "the judge's memory and reply caps, so codegym reports the task broken (infra)",
}

DRIVER = """
import json, os, sys, time
from evalplus.evaluate import evaluate
t0 = time.perf_counter()
evaluate(sys.argv[1], samples=sys.argv[2], parallel=int(sys.argv[4]), i_just_wanna_run=True)
with open(sys.argv[3], "w") as f:
    json.dump({"eval": time.perf_counter() - t0}, f)
sys.stdout.flush()
os._exit(0)  # evaluate() leaves a stall-watchdog thread that sleeps up to 20 s before exit
"""

LOOP = "    while True:\n        pass\n"


def samples_for(
    tasks: list[Task], dataset: str, seed: int = 0, loop_every: int = 10
) -> list[tuple[str, str]]:
    """(task id, completion): the reference, mutants of it, and for every ``loop_every``-th
    task (0: none) a program that never returns."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for i, t in enumerate(tasks):
        out.append((t.id, t.reference))
        full = t.prompt + t.reference
        mutants = [
            m.edits[0].mutated
            for m in find_mutants("solution.py", full)
            if m.edits[0].mutated.startswith(t.prompt)
        ]
        for mutated in rng.sample(mutants, min(MUTANTS[dataset], len(mutants))):
            out.append((t.id, mutated[len(t.prompt) :]))
        if loop_every and i % loop_every == 0:
            head = t.reference if dataset == "mbpp" else ""
            # MBPP's completion is a whole program: its function made to loop first
            loop = _looping(head, t.entry_point) if head else LOOP
            if loop:
                out.append((t.id, loop))
    return out


def _looping(program: str, entry: str) -> str:
    marker = f"def {entry}("
    at = program.find(marker)
    if at < 0:
        return ""
    colon = program.find(":\n", at)
    return program[: colon + 2] + LOOP + program[colon + 2 :] if colon > 0 else ""


def run_evalplus(
    python: Path, dataset: str, data: Path, samples: list[tuple[str, str]], tmp: Path
) -> tuple[float, list[tuple[bool, bool]]]:
    path, timings = tmp / "samples.jsonl", tmp / "t.json"
    path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in samples))
    plain = tmp / FILES[dataset].removesuffix(".gz")
    plain.write_bytes(gzip.decompress(data.read_bytes()))
    var = "HUMANEVAL_OVERRIDE_PATH" if dataset == "humaneval" else "MBPP_OVERRIDE_PATH"
    env = os.environ | {var: str(plain), "XDG_CACHE_HOME": str(tmp)}
    argv = [str(python), "-c", DRIVER, dataset, str(path), str(timings), str(WORKERS)]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"evalplus exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    results = json.loads((tmp / "samples_eval_results.json").read_text())["eval"]
    # per task, in completion order: the order of that task's lines in the samples file
    seen: dict[str, int] = {}
    verdicts = []
    for tid, _ in samples:
        r = results[tid][seen.get(tid, 0)]
        seen[tid] = seen.get(tid, 0) + 1
        verdicts.append((r["base_status"] == "pass", r["plus_status"] == "pass"))
    return total, verdicts


async def run_codegym(
    tasks: dict[str, Task], samples: list[tuple[str, str]]
) -> tuple[float, list[tuple[bool, bool] | None], float]:
    """Seconds, verdicts, and the workers' seconds spent on samples that ran out of time
    in some part (which evalplus's budgets, the same rule, spend alike)."""
    start = time.perf_counter()
    async with Sandbox(workers=WORKERS) as sb:
        scores = await asyncio.gather(*(score(sb, tasks[t], c) for t, c in samples))
    total = time.perf_counter() - start
    out: list[tuple[bool, bool] | None] = []
    for s in scores:
        parts = dict(s.parts)
        if s.is_infra or not parts:
            out.append(None)
        else:
            out.append((parts["base"] == "pass", parts["plus"] == "pass"))
    timed_out = sum(s.wall_s for s in scores if "timeout" in dict(s.parts).values())
    return total, out, timed_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=sorted(FILES))
    ap.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data/evalplus")
    ap.add_argument("--venv", type=Path, default=Path("/work/evalplus-venv"))
    ap.add_argument(
        "--loop-every",
        type=int,
        default=10,
        metavar="N",
        help="a never-returning sample for every N-th task (0: none)",
    )
    args = ap.parse_args()
    python = evalplus_python(args.venv)
    data = args.data / FILES[args.dataset]
    t0 = time.perf_counter()
    task_list = load_suite(str(data))
    load_s = time.perf_counter() - t0
    tasks = {t.id: t for t in task_list}
    samples = samples_for(task_list, args.dataset, loop_every=args.loop_every)
    n = len(samples)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# {platform.node()} nproc={os.cpu_count()} load={load} python={sys.version.split()[0]}")
    print(f"[{args.dataset}+] {len(tasks)} tasks, {n} samples, {WORKERS} workers")
    with tempfile.TemporaryDirectory(prefix="bench-evalplus-") as tmp:
        theirs_s, theirs = run_evalplus(python, args.dataset, data, samples, Path(tmp))
    ours_s, ours, timed_out = asyncio.run(run_codegym(tasks, samples))
    ours_s += load_s
    same = differ = known = infra = 0
    shown: list[str] = []
    for (tid, _), a, b in zip(samples, theirs, ours, strict=True):
        if tid in KNOWN:
            known += 1
        elif b is None:
            infra += 1
            shown.append(f"codegym infra on {tid}")
        elif a == b:
            same += 1
        else:
            differ += 1
            shown.append(f"{tid}: evalplus base/plus {a}, codegym {b}")
    print("\n| metric | evalplus 0.3.1 | codegym | ratio |\n|---|---|---|---|")
    ratio = theirs_s / ours_s
    print(f"| {n} samples, end to end | {theirs_s:.1f} s | {ours_s:.1f} s | {ratio:.2f}x |")
    for i, name in ((0, "base"), (1, "plus")):
        pa = sum(v[i] for v in theirs) / n
        pb = sum(v[i] for v in ours if v) / max(1, sum(1 for v in ours if v))
        print(f"| pass rate, {name} | {pa:.3f} | {pb:.3f} | |")
    judged = same + differ
    print(f"\nagreement: {same}/{judged} samples ({same / max(1, judged):.2%}) on both verdicts; "
          f"{known} on documented differences, {infra} infra")  # fmt: skip
    print(f"codegym's workers spent {timed_out:.1f} s on samples that ran out of time in a "
          f"part ({timed_out / WORKERS:.1f} s of wall clock at {WORKERS} workers); evalplus "
          "spends its own budgets, the same rule, on them")  # fmt: skip
    for line in shown[:40]:
        print(" ", line)
    for tid, why in KNOWN.items():
        if tid in tasks:
            print(f"known: {tid}: {why}")


if __name__ == "__main__":
    main()
