"""Repository tasks: how long a reward takes, whether grading agrees with itself, and
whether injected faults ever turn into model outcomes.

    .venv/bin/python benchmarks/swe_bench.py TASKS.jsonl [--tasks 60] [--workers 2]

Sections, on the first ``--tasks`` tasks of the file (made by ``codegym tasks synth``):
  time       seconds per grading (fork of the task's state, apply, restore tests, suite,
             JUnit), p50 and p95, gold patches
  agreement  every gold patch and a wrong patch per task (another task's bug: it applies
             and fixes nothing) graded 3 times: identical outcomes in all three
  faults     gold patches graded with the worker killed mid-suite (must answer ``infra`` or,
             when the kill missed, ``resolved``: never a model failure), and with a patch
             that hangs the suite (``time.sleep`` at import: the model's ``tests_timeout``)
  full disk  (as root) the tasks' images copied to a small tmpfs that is then filled: the
             first grading of each task cannot record its state (must be ``infra``); with
             the space back, the same gold patch must resolve
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from codegym.sandbox import Sandbox
from codegym.sandbox.images import ImageStore
from codegym.tasks.swe.grade import grade, task_state
from codegym.tasks.swe.task import SweTask, load_tasks


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def timing(sb: Sandbox, tasks: list[SweTask]) -> list[float]:
    for t in tasks:  # the task states, made once, as a scoring run would
        await task_state(sb, t)
    times = []
    for t in tasks:
        t0 = time.perf_counter()
        g = await grade(sb, t, t.patch)
        times.append(time.perf_counter() - t0)
        assert g.resolved, (t.instance_id, g)
    return times


async def agreement(sb: Sandbox, tasks: list[SweTask]) -> tuple[int, int, Counter[str]]:
    same = total = 0
    seen: Counter[str] = Counter()
    for i, t in enumerate(tasks):
        wrong = tasks[(i + 1) % len(tasks)].bug  # another task's bug: applies, fixes nothing
        for patch in (t.patch, wrong):
            outs = [(await grade(sb, t, patch)).outcome for _ in range(3)]
            seen.update(outs)
            total += 1
            same += len(set(outs)) == 1
    return same, total, seen


async def faults(sb: Sandbox, tasks: list[SweTask]) -> Counter[str]:
    """Each fault on each task: what the grading answered (``infra`` or the truth)."""
    out: Counter[str] = Counter()
    for t in tasks:
        # the worker killed while the suite runs
        async def kill_soon() -> None:
            await asyncio.sleep(0.15)
            for w in sb._workers:
                if w.busy.locked() and w.proc is not None:
                    w.proc.kill()

        killer = asyncio.create_task(kill_soon())
        g = await grade(sb, t, t.patch)
        await killer
        out[f"worker killed: {g.outcome}"] += 1
        # a hung suite caused by the patch: the model's timeout
        g = await grade(sb, t.model_copy(update={"timeout_s": 5.0}), _with_sleep(t))
        out[f"patch hangs: {g.outcome}"] += 1
    return out


async def full_disk(store: ImageStore, tasks: list[SweTask]) -> Counter[str]:
    out: Counter[str] = Counter()
    if os.geteuid() != 0:
        return out
    disk = Path(tempfile.mkdtemp(prefix="codegym-bench-disk-"))
    os.chmod(disk, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)], check=True)
    try:
        small = ImageStore(disk / "cache")
        for digest in {t.image for t in tasks}:
            image = store.get(digest)
            for layer in store.layer_paths(image):
                if not (small.layers_dir / layer.name).exists():
                    dst = str(small.layers_dir / layer.name)
                    subprocess.run(["cp", "-a", str(layer), dst], check=True)
            small.add(image, tag=False)
        async with Sandbox(workers=2, images=small) as sb:
            with open(disk / "fill", "wb") as f:
                try:
                    while f.write(bytes(1 << 20)):
                        f.flush()
                except OSError:
                    pass
            for t in tasks:
                out[f"disk full: {(await grade(sb, t, t.patch)).outcome}"] += 1
            (disk / "fill").unlink()
            for t in tasks:
                out[f"space back: {(await grade(sb, t, t.patch)).outcome}"] += 1
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
        disk.rmdir()
    return out


def _with_sleep(t: SweTask) -> str:
    """The gold patch with a sleep before its first fixed line (same indentation): the
    fixed code hangs when it runs."""
    lines = t.patch.splitlines(keepends=True)
    out: list[str] = []
    done = False
    for line in lines:
        if not done and line.startswith("+") and not line.startswith("+++"):
            indent = line[1 : len(line) - len(line[1:].lstrip())]
            out.append(f'+{indent}__import__("time").sleep(1000)\n')
            done = True
        out.append(line)
    # one more line on the new side of the first hunk
    for i, line in enumerate(out):
        if line.startswith("@@"):
            old, new = line.split(" ")[1:3]
            start, _, count = new[1:].partition(",")
            out[i] = f"@@ {old} +{start},{int(count or 1) + 1} @@\n"
            break
    return "".join(out)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks")
    ap.add_argument("--tasks", dest="n", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default=None)
    args = ap.parse_args()
    every = load_tasks(Path(args.tasks))
    tasks = every[:: max(1, len(every) // args.n)][: args.n]  # spread over the packages
    store = ImageStore(args.cache)
    async with Sandbox(workers=args.workers, images=store) as sb:
        times = await timing(sb, tasks)
        same, total, seen = await agreement(sb, tasks)
        fault = await faults(sb, tasks[: max(5, len(tasks) // 6)])
    fault += await full_disk(store, tasks[: max(5, len(tasks) // 6)])
    print(f"tasks: {len(tasks)}  packages: {len({t.repo for t in tasks})}")
    print(f"grading time: p50 {statistics.median(times):.2f} s, p95 {pct(times, 0.95):.2f} s, "
          f"max {max(times):.2f} s  (target p50 <= 3 s, p95 <= 10 s)")  # fmt: skip
    print(
        f"agreement: {same}/{total} patches graded 3 times alike ({same / total:.2%}); {dict(seen)}"
    )
    print(f"faults: {dict(fault)}")


if __name__ == "__main__":
    asyncio.run(main())
