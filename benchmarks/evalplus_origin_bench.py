"""EvalPlus's two layouts judged by codegym on the same samples: the release files
(base and plus inputs, per-input budgets, ``--format evalplus``) against the original-layout
files (``*-OriginFmt``: every input in one ``test`` script comparing with numpy, run in the
shipped ``numpy`` environment). Per-sample agreement on the final verdict, and the time of
each, offline.

    .venv/bin/python benchmarks/evalplus_origin_bench.py humaneval
    .venv/bin/python benchmarks/evalplus_origin_bench.py mbpp

The samples are ``evalplus_plus_bench``'s (the reference, AST mutants of it, a
never-returning program for every tenth task). The release layout agrees with evalplus's
own evaluator per sample (docs/BENCHMARKS.md), so a disagreement here is the original
layout's: one run and one CPU limit for all inputs instead of a budget per input, and its
own test scripts (HumanEval/32's is broken as released).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

from evalplus_plus_bench import FILES, WORKERS, samples_for  # this folder is on sys.path

from codegym.sandbox import Sandbox
from codegym.sandbox.images import ImageStore
from codegym.tasks import Score, Task, environments, load_suite, score

ORIGIN = {"humaneval": "HumanEvalPlus-OriginFmt.jsonl.gz", "mbpp": "MbppPlus-OriginFmt.jsonl.gz"}


async def judge(tasks: dict[str, Task], samples: list[tuple[str, str]]) -> tuple[float, list]:
    async with Sandbox(workers=WORKERS, images=ImageStore()) as sb:
        await asyncio.to_thread(environments.of(sb).prepare, ["numpy"])
        start = time.perf_counter()
        scores = await asyncio.gather(*(score(sb, tasks[t], c) for t, c in samples))
    return time.perf_counter() - start, scores


def _verdict(s: Score) -> bool | None:
    return None if s.is_infra else s.passed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=sorted(FILES))
    ap.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/data/evalplus")
    args = ap.parse_args()
    plus = list(load_suite(str(args.data / FILES[args.dataset])))
    named = "humaneval" if args.dataset == "humaneval" else "mbpp"  # detected, it is refused
    origin = {t.id: t for t in load_suite(str(args.data / ORIGIN[args.dataset]), format=named)}

    def origin_id(tid: str) -> str:  # MBPP+'s original layout numbers its tasks bare
        return tid.removeprefix("Mbpp/") if args.dataset == "mbpp" else tid

    plus = [t for t in plus if origin_id(t.id) in origin]
    samples = samples_for(plus, args.dataset)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# {platform.node()} nproc={os.cpu_count()} load={load} python={sys.version.split()[0]}")
    print(f"[{args.dataset}+] {len(plus)} tasks in both files, {len(samples)} samples")
    plus_s, plus_scores = asyncio.run(judge({t.id: t for t in plus}, samples))
    origin_s, origin_scores = asyncio.run(
        judge({t: origin[origin_id(t)] for t, _ in samples}, samples)
    )
    same = infra = 0
    differ: Counter[str] = Counter()
    why: dict[str, str] = {}
    for (tid, _), a, b in zip(samples, plus_scores, origin_scores, strict=True):
        va, vb = _verdict(a), _verdict(b)
        if va is None or vb is None:
            infra += 1
        elif va == vb:
            same += 1
        else:
            differ[tid] += 1
            why.setdefault(tid, f"release {a.outcome}, original {b.outcome}: {b.detail[:90]}")
    n = len(samples)
    print("\n| layout | seconds | pass rate |\n|---|---|---|")
    for name, secs, scores in (("release (base + plus)", plus_s, plus_scores),
                               ("original (numpy)", origin_s, origin_scores)):  # fmt: skip
        print(f"| {name} | {secs:.1f} | {sum(s.passed for s in scores) / n:.3f} |")
    judged = same + sum(differ.values())
    print(f"\nagreement: {same}/{judged} samples ({same / max(1, judged):.2%}); {infra} infra")
    for tid, k in differ.most_common(30):
        print(f"  {tid}: {k} samples; first: {why[tid]}")


if __name__ == "__main__":
    main()
