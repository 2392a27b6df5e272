"""Measure a model's pass@1 / pass@k on held-out synthetic tasks (sampled, sandbox-scored).

    python scripts/measure_tiny.py [--model DIR] [--tasks 100] [-k 8] [--temperature 1.0]

Without ``--model`` it uses (and if needed builds) the cached tiny model. Tasks come from
``HELDOUT_SEED``, which the pretraining corpus never uses. Prints one JSON object per
(family, difficulty) with pass@1, pass@k, their outcome counts and the sampling time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import torch

from codegym.evals import pass_at_k, wilson_interval
from codegym.models import ensure_tiny_model, sample
from codegym.sandbox import Sandbox
from codegym.tasks import score
from codegym.tasks.synthetic import FAMILIES, HELDOUT_SEED, generate


async def measure(
    model: Path, family: str, difficulty: int, n_tasks: int, k: int, temperature: float
) -> dict[str, object]:
    tasks = generate(family, n_tasks, HELDOUT_SEED, difficulty)
    t0 = time.perf_counter()
    completions = sample(
        model,
        [t.prompt for t in tasks],
        n=k,
        temperature=temperature,
        max_new_tokens=64,
        seed=1,
        stop=("\n\n",),
    )
    model_s = time.perf_counter() - t0
    async with Sandbox(tier="jail", workers=2) as sb:
        scores = await asyncio.gather(
            *(score(sb, t, c) for t, group in zip(tasks, completions, strict=True) for c in group)
        )
    passed = [sum(s.passed for s in scores[i * k : (i + 1) * k]) for i in range(n_tasks)]
    p1 = sum(pass_at_k(k, c, 1) for c in passed) / n_tasks
    lo, hi = wilson_interval(p1 * n_tasks, n_tasks)
    return {
        "family": family,
        "difficulty": difficulty,
        "tasks": n_tasks,
        "k": k,
        "temperature": temperature,
        "pass@1": round(p1, 4),
        "pass@1_ci95_task_level": [round(lo, 3), round(hi, 3)],
        f"pass@{k}": round(sum(pass_at_k(k, c, k) for c in passed) / n_tasks, 4),
        "outcomes": dict(Counter(s.outcome for s in scores)),
        "sample_s": round(model_s, 1),
        "example": completions[0][0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--difficulty", type=int, action="append", default=None)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = args.model or ensure_tiny_model(log_every=50)
    for family in FAMILIES:
        for d in args.difficulty or [1]:
            row = asyncio.run(measure(model, family, d, args.tasks, args.k, args.temperature))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
